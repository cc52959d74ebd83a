"""A master that starts first asks its former replicas whether one was promoted past it.

Outside Kubernetes nothing else stops an old master, restarted with the command
it was first started with, from taking writes beside the replica promoted in
its absence; under ASYNC it would acknowledge them, and cut them later when it
is made the new master's replica. So before a MASTER takes its new term it asks
every peer of its replica book (:mod:`.replica_book`) for its admin
``BrokerInfo``, all at once, each within a short timeout. A peer of the same
group (``--broker-name``) in a newer epoch than this broker's own is proof that
the group moved on: a MASTER there is the broker that was promoted; a REPLICA
there follows it. Then the start is refused (:class:`SupersededMaster`) with
one line naming that broker, its epoch and the command-line options that
rejoin the group as its replica. Peers are asked over TLS as :mod:`..tls.peers`
says. A peer that does not answer blocks nothing
(the start logs which were not reachable); with no remembered peer no call is
made at all.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
from collections.abc import Mapping

from ..client.admin import AdminClient
from ..client.channels import PLAINTEXT, ClientTls
from ..client.credentials import Credentials
from ..client.errors import SkiffError

log = logging.getLogger(__name__)

# Each former replica is asked at most this long; all are asked at once.
PEER_ASK_TIMEOUT_S = 2.0
_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


class SupersededMaster(Exception):
    """Another broker of the group is master in a newer epoch; the message says what to do."""


@dataclasses.dataclass(frozen=True, slots=True)
class PeerAnswer:
    endpoint: str  # where it was asked
    broker_name: str
    role: str
    epoch: int
    ha_address: str  # a master's replication address, as it reports it
    master_address: str  # the master a replica follows


def ask_peers(
    endpoints: Mapping[str, str],
    *,
    credentials: Credentials | None = None,
    tls: ClientTls = PLAINTEXT,
    timeout: float = PEER_ASK_TIMEOUT_S,
) -> tuple[list[PeerAnswer], dict[str, str]]:
    """The answers of the peers at ``endpoints`` (by name), and why the others gave none."""
    answers: list[PeerAnswer] = []
    silent: dict[str, str] = {}
    if not endpoints:
        return answers, silent

    def ask(endpoint: str) -> PeerAnswer:
        with AdminClient(endpoint, timeout=timeout, tls=tls, credentials=credentials) as admin:
            info = admin.broker_info()
        return PeerAnswer(
            endpoint,
            info.broker_name,
            info.role,
            info.epoch,
            _reachable_address(info.ha_address, endpoint),
            info.master_address,
        )

    unique = sorted(set(endpoints.values()))
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(unique))) as pool:
        futures = {endpoint: pool.submit(ask, endpoint) for endpoint in unique}
        for endpoint, future in futures.items():
            try:
                answers.append(future.result())
            except SkiffError as exc:
                silent[endpoint] = exc.code
            except (OSError, ValueError) as exc:
                silent[endpoint] = str(exc) or type(exc).__name__
    return answers, silent


def _reachable_address(address: str, asked_endpoint: str) -> str:
    """A wildcard listen host means "every interface": the host it was asked at reaches it."""
    host, _, port = address.rpartition(":")
    if not address or host not in _WILDCARD_HOSTS:
        return address
    return f"{asked_endpoint.rpartition(':')[0]}:{port}"


def successor(group: str, own_epoch: int, answers: list[PeerAnswer]) -> PeerAnswer | None:
    """The answer that proves a newer term of ``group``: its newest master, else a replica."""
    newer = [a for a in answers if a.broker_name == group and a.epoch > own_epoch]
    if not newer:
        return None
    return max(newer, key=lambda a: (a.epoch, a.role == "MASTER"))


def refusal(group: str, own_epoch: int, found: PeerAnswer, role_file: str = "") -> str:
    """The one line a superseded master exits with.

    ``role_file``: the file that made this broker a master (it must go before it can follow).
    """
    if found.role == "MASTER":
        address = found.ha_address
        what = (
            f"broker {found.endpoint} was promoted to master of group {group} at epoch "
            f"{found.epoch}, newer than this broker's epoch {own_epoch}"
        )
    else:
        address = found.master_address
        what = (
            f"broker {found.endpoint} of group {group} follows a master of epoch "
            f"{found.epoch}{f' at {address}' if address else ''}, newer than this broker's "
            f"epoch {own_epoch}"
        )
    master = address or "<the current master's replication address>"
    step = f"delete {role_file} and start it" if role_file else "start it"
    return (
        f"{what}; as a master this broker would take writes beside it, so it does not "
        f"start. Rejoin the group as its replica: {step} with --role REPLICA "
        f"--master-address {master}"
    )


def check_not_superseded(
    group: str,
    own_epoch: int,
    endpoints: Mapping[str, str],
    *,
    credentials: Credentials | None = None,
    tls: ClientTls = PLAINTEXT,
    role_file: str = "",
) -> None:
    """Raise SupersededMaster if a former replica reports a newer term of ``group``."""
    if not endpoints:
        return
    answers, silent = ask_peers(endpoints, credentials=credentials, tls=tls)
    found = successor(group, own_epoch, answers)
    if found is not None:
        raise SupersededMaster(refusal(group, own_epoch, found, role_file))
    if silent:
        log.warning(
            "former replicas not reachable, so not asked whether one was promoted: %s",
            ", ".join(f"{endpoint} ({why})" for endpoint, why in sorted(silent.items())),
        )
    for answer in answers:
        if answer.broker_name == group and answer.role == "MASTER":
            # Same or older term: two masters by configuration, not by a promotion.
            log.warning(
                "former replica %s is also a master of group %s (epoch %d, this broker's "
                "%d); point it at this broker or stop it",
                answer.endpoint,
                group,
                answer.epoch,
                own_epoch,
            )
