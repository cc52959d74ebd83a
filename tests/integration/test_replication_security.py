"""Users, ACLs and the replication stream between real broker processes.

A user applied on a master signs requests on its replica a moment later and
after the replica is promoted, also when the master stops right after applying it;
the replica refuses user changes and says where to apply them, and keeps its own
bootstrap user. With a shared CA (``--tls-ca``) the stream runs over mutual TLS; a
replica whose certificate comes from another CA is refused, and the master logs it with
the replica's address.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.broker_process import BrokerProcess, killed_afterwards, start_broker
from tests.support.certificate_authority import CertificateAuthority
from tests.support.tcp_queues import unread_bytes_at
from tests.support.waiting import wait_for

from skiff_broker.client.admin import AclEntry, AdminClient
from skiff_broker.client.credentials import Credentials
from skiff_broker.client.errors import FailedPrecondition, SkiffError

HEARTBEATS = ("--ha-heartbeat-interval", "0.5", "--ha-heartbeat-timeout", "5")
ROOT = Credentials("root", "root-secret")
KEEPER = Credentials("keeper", "keeper-secret")  # only the replica's bootstrap user
ALICE = Credentials("alice", "alice-secret")
ALICE_ACL = [AclEntry(("Topic:orders",), ("Pub", "Sub"))]


@pytest.fixture
def started() -> Iterator[list[BrokerProcess]]:
    with killed_afterwards() as brokers:
        yield brokers


def auth_env(user: Credentials) -> dict[str, str]:
    return {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": f"{user.access_key}:{user.secret_key}"}


def signs_in(broker: BrokerProcess, user: Credentials) -> bool:
    """Whether a request signed by ``user`` is served (admin calls need a super user)."""
    try:
        with AdminClient(broker.endpoint, credentials=user, timeout=10) as admin:
            admin.broker_info()
    except SkiffError:
        return False
    return True


def test_users_reach_the_replica_and_stay_after_promotion(
    tmp_path: Path, started: list[BrokerProcess]
) -> None:
    (tmp_path / "master").mkdir()
    (tmp_path / "replica").mkdir()
    master = start_broker(tmp_path / "master", "--role", "MASTER", *HEARTBEATS, env=auth_env(ROOT))
    started.append(master)
    replica = start_broker(
        tmp_path / "replica",
        *("--role", "REPLICA", "--master-address", master.ha_endpoint, *HEARTBEATS),
        env=auth_env(KEEPER),
    )
    started.append(replica)
    assert any("replication is not encrypted" in r["msg"] for r in master.log_lines())
    with AdminClient(master.endpoint, credentials=ROOT) as admin:
        admin.apply_user(ALICE.access_key, ALICE.secret_key, super_user=True)
        admin.apply_acl(ALICE.access_key, ALICE_ACL)

    wait_for(lambda: signs_in(replica, ALICE), "alice to sign in on the replica")
    assert signs_in(replica, KEEPER), "the replica lost its own bootstrap user"
    with AdminClient(replica.endpoint, credentials=ALICE) as admin:
        # The user and its ACL were two changes on the master: a METADATA document sent
        # between them carries alice without her ACL, and the next one carries both.
        wait_for(lambda: admin.get_acl(ALICE.access_key) == ALICE_ACL, "alice's ACL on the replica")
        with pytest.raises(FailedPrecondition, match="apply them on the master") as refused:
            admin.apply_user("mallory", "mallory-secret")
        assert master.ha_endpoint in str(refused.value)
        with pytest.raises(FailedPrecondition, match="apply them on the master"):
            admin.delete_user(ALICE.access_key)
        assert {u.access_key for u in admin.list_users()} == {"alice", "keeper", "root"}

    # A change on the master replaces the replica's copy.
    with AdminClient(master.endpoint, credentials=ROOT) as admin:
        admin.delete_user(ALICE.access_key)
    wait_for(lambda: not signs_in(replica, ALICE), "alice to be gone from the replica")
    with AdminClient(master.endpoint, credentials=ROOT) as admin:
        admin.apply_user(ALICE.access_key, ALICE.secret_key, super_user=True)
    wait_for(lambda: signs_in(replica, ALICE), "alice back on the replica")

    master.kill()
    with AdminClient(replica.endpoint, credentials=KEEPER) as admin:
        admin.promote()
    for user in (ROOT, ALICE, KEEPER):
        assert signs_in(replica, user), f"{user.access_key} is gone after the promotion"
    with AdminClient(replica.endpoint, credentials=ALICE) as admin:
        assert admin.apply_user("bob", "bob-secret")


CAROL = Credentials("carol", "carol-secret")


def test_a_user_applied_just_before_the_master_stops_reaches_the_replica(
    tmp_path: Path, started: list[BrokerProcess]
) -> None:
    # State tables go to replicas once a second; a master stopped (as a deleted pod is)
    # within that second hands its last changes over before it goes, so the replica
    # that takes over knows every user the master said it applied.
    (tmp_path / "master").mkdir()
    (tmp_path / "replica").mkdir()
    master = start_broker(tmp_path / "master", "--role", "MASTER", *HEARTBEATS, env=auth_env(ROOT))
    started.append(master)
    replica = start_broker(
        tmp_path / "replica",
        *("--role", "REPLICA", "--master-address", master.ha_endpoint, *HEARTBEATS),
        env=auth_env(KEEPER),
    )
    started.append(replica)
    wait_for(lambda: signs_in(replica, ROOT), "the master's users on the replica")
    with AdminClient(master.endpoint, credentials=ROOT) as admin:
        admin.apply_user(CAROL.access_key, CAROL.secret_key, super_user=True)
    master.stop()
    wait_for(lambda: signs_in(replica, CAROL), "carol on the replica after the master stopped")


def start_in(tmp_path: Path, name: str, *args: str) -> BrokerProcess:
    (tmp_path / name).mkdir()
    return start_broker(tmp_path / name, *HEARTBEATS, *args)


def test_replication_runs_over_mutual_tls_and_refuses_a_replica_of_another_ca(
    tmp_path: Path, started: list[BrokerProcess]
) -> None:
    ca = CertificateAuthority(tmp_path / "ca")
    master = start_in(tmp_path, "master", "--role", "MASTER", *ca.broker_args("master"))
    started.append(master)
    follow = ("--role", "REPLICA", "--master-address", master.ha_endpoint)
    replica = start_in(tmp_path, "replica", *follow, *ca.broker_args("replica"))
    started.append(replica)
    with AdminClient(master.endpoint) as admin:
        admin.create_topic("over-tls")
    with AdminClient(replica.endpoint) as admin:
        wait_for(
            lambda: "over-tls" in {t.name for t in admin.list_topics()}, "the topic on the replica"
        )
    assert any("over mutual TLS" in r["msg"] for r in master.log_lines())
    assert not any("not encrypted" in r["msg"] for r in master.log_lines())

    # Trusts the group's CA, but holds a certificate another CA signed.
    foreign = CertificateAuthority(tmp_path / "foreign", name="foreign-ca")
    stranger = start_in(
        tmp_path, "stranger", *follow, *foreign.broker_args("stranger", ca=ca.ca_file)
    )
    started.append(stranger)

    def refusals() -> list[str]:
        return [
            r["msg"]
            for r in master.log_lines()
            if r["msg"].startswith("refused a replication connection") and "TLS" in r["msg"]
        ]

    wait_for(lambda: bool(refusals()), "the master to refuse the stranger")
    assert "127.0.0.1:" in refusals()[0]
    wait_for(
        lambda: any("--tls-cert signed by" in r["msg"] for r in stranger.log_lines()),
        "the stranger to name its certificate as the likely cause",
    )
    with AdminClient(stranger.endpoint) as admin:
        state = admin.broker_info()
        assert not state.replica_connected
        assert "over-tls" not in {t.name for t in admin.list_topics()}
    with AdminClient(master.endpoint) as admin:
        connected = [r.name for r in admin.broker_info().replicas if r.connected]
    assert len(connected) == 1 and "stranger" not in connected[0]


def test_a_replica_whose_handshake_waited_for_the_master_connects_at_the_first_try(
    tmp_path: Path, started: list[BrokerProcess]
) -> None:
    """The master's process is stopped while a replica connects, so the replica's TLS
    ClientHello is already waiting when the master takes the connection. The handshake
    still completes at once: an upgrade to TLS after accepting loses bytes the plain
    stream has read, and the handshake then hangs until it times out."""
    ca = CertificateAuthority(tmp_path / "ca")
    master = start_in(tmp_path, "master", "--role", "MASTER", *ca.broker_args("master"))
    started.append(master)
    master.proc.send_signal(signal.SIGSTOP)
    try:
        follow = ("--role", "REPLICA", "--master-address", master.ha_endpoint)
        replica = start_in(tmp_path, "replica", *follow, *ca.broker_args("replica"))
        started.append(replica)
        # The replica dials as soon as it is up; its connection and ClientHello wait in
        # the stopped master's backlog.
        ha_port = int(master.ha_endpoint.rpartition(":")[2])
        wait_for(
            lambda: unread_bytes_at(ha_port),
            "the replica's ClientHello to wait unread at the stopped master",
        )
    finally:
        master.proc.send_signal(signal.SIGCONT)

    def connected() -> bool:
        with AdminClient(replica.endpoint) as admin:
            return admin.broker_info().replica_connected

    wait_for(connected, "the replica to connect")
    assert not any("interrupted" in r["msg"] for r in replica.log_lines())
    assert not any("refused a replication" in r["msg"] for r in master.log_lines())
