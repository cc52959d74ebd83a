"""The ``skiff`` command."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import TYPE_CHECKING

import click

from . import __version__
from .commands import register as register_client_commands
from .config import BrokerConfig
from .logs import configure_logging
from .port_check import PortUnavailable, check_can_listen
from .store.config import (
    LAPTOP_COMMIT_LOG_FILE_SIZE,
    LAPTOP_INDEX_FILE_ENTRIES,
    FlushType,
    StoreConfig,
)

if TYPE_CHECKING:
    from .server.app import BrokerServer
    from .store.store_check import CheckOutcome, RepairOutcome

log = logging.getLogger("skiff")

_SIZE_SUFFIXES = {"k": 1024, "m": 1024**2, "g": 1024**3}


class ByteSize(click.ParamType):
    """``1073741824``, ``1g``, ``256m`` or ``64k``."""

    name = "size"

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().removesuffix("ib").removesuffix("b")
        factor = _SIZE_SUFFIXES.get(text[-1:], 1)
        number = text[:-1] if text[-1:] in _SIZE_SUFFIXES else text
        try:
            return int(float(number) * factor)
        except ValueError:
            self.fail(f"{value!r} is not a size like 1g, 256m or 65536", param, ctx)


# Defaults the options take from the config objects, not from literals of their own.
_BROKER_DEFAULTS = BrokerConfig(store=StoreConfig(data_dir=""))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="skiff")
@click.option(
    "--log-level",
    envvar="SKIFF_LOG_LEVEL",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def main(log_level: str) -> None:
    """Skiff: a RocketMQ-compatible message broker."""
    configure_logging(log_level)


@main.command()
@click.option(
    "--data-dir",
    envvar="SKIFF_DATA_DIR",
    default="./skiff-data",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where the commit log, queues, index and config live.",
)
@click.option(
    "--listen",
    envvar="SKIFF_LISTEN",
    default="127.0.0.1:8081",
    show_default=True,
    help="gRPC address (HOST:PORT; port 0 picks a free one). Clients on other hosts "
    "need an address they can reach, e.g. 0.0.0.0:8081.",
)
@click.option(
    "--metrics-listen",
    envvar="SKIFF_METRICS_LISTEN",
    default="127.0.0.1:5557",
    show_default=True,
    help="Where to serve Prometheus metrics at /metrics (HOST:PORT; port 0 picks a free "
    "one; empty: no endpoint). 5557 is RocketMQ 5's metrics port.",
)
@click.option(
    "--advertise",
    envvar="SKIFF_ADVERTISE",
    default="",
    help="HOST:PORT given to clients in routes (default: the address they connected to).",
)
@click.option("--broker-name", envvar="SKIFF_BROKER_NAME", default="broker-a", show_default=True)
@click.option(
    "--flush-type",
    envvar="SKIFF_FLUSH_TYPE",
    type=click.Choice([t.value for t in FlushType]),
    default=FlushType.ASYNC_FLUSH.value,
    show_default=True,
    help="SYNC_FLUSH acknowledges a write once it is on disk (group commit).",
)
@click.option(
    "--transient-store-pool/--no-transient-store-pool",
    envvar="SKIFF_TRANSIENT_STORE_POOL",
    default=False,
    show_default=True,
    help="Append into memory buffers committed to the file in the background (ASYNC_FLUSH).",
)
@click.option(
    "--commit-log-file-size",
    envvar="SKIFF_COMMIT_LOG_FILE_SIZE",
    type=ByteSize(),
    default=LAPTOP_COMMIT_LOG_FILE_SIZE,
    show_default="64m",
    help="Size of each pre-allocated commit-log segment (RocketMQ's mappedFileSizeCommitLog; "
    "its production size, 1g, is what the operator sets). A store keeps the size it was "
    "made with.",
)
@click.option(
    "--max-message-size",
    envvar="SKIFF_MAX_MESSAGE_SIZE",
    type=ByteSize(),
    default="4m",
    show_default=True,
)
@click.option(
    "--consume-queue-file-entries",
    envvar="SKIFF_CONSUME_QUEUE_FILE_ENTRIES",
    type=click.IntRange(min=1),
    default=300_000,
    show_default=True,
    help="Entries (20 bytes each) in each consume-queue file, made per queue on its first "
    "message (RocketMQ's mappedFileSizeConsumeQueue / 20).",
)
@click.option(
    "--index-file-entries",
    envvar="SKIFF_INDEX_FILE_ENTRIES",
    type=click.IntRange(min=4),
    default=LAPTOP_INDEX_FILE_ENTRIES,
    show_default=True,
    help="Keys in each pre-allocated index file, 20 bytes each (RocketMQ's maxIndexNum; its "
    "production size, 20000000, is what the operator sets).",
)
@click.option(
    "--index-hash-slots",
    envvar="SKIFF_INDEX_HASH_SLOTS",
    type=click.IntRange(min=0),
    default=0,
    show_default="a quarter of --index-file-entries",
    help="Hash slots (4 bytes each) in each index file (RocketMQ's maxHashSlotNum).",
)
@click.option(
    "--file-reserved-hours",
    envvar="SKIFF_FILE_RESERVED_HOURS",
    type=float,
    default=72.0,
    show_default=True,
    help="Delete commit-log segments older than this.",
)
@click.option(
    "--clean-file-forcibly/--no-clean-file-forcibly",
    envvar="SKIFF_CLEAN_FILE_FORCIBLY",
    default=True,
    show_default=True,
    help=(
        "When the disk passes 85% use, delete the oldest segments even if unexpired and "
        "unconsumed (logged per topic as a WARNING); off keeps them and refuses writes "
        "(DISK_FULL) past 90% (RocketMQ's cleanFileForciblyEnable)."
    ),
)
@click.option(
    "--delete-when",
    envvar="SKIFF_DELETE_WHEN",
    default="04",
    show_default=True,
    help="Hours at which old segments are deleted, e.g. 04 or 04;16.",
)
@click.option(
    "--sync-flush-timeout",
    envvar="SKIFF_SYNC_FLUSH_TIMEOUT",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds a SYNC_FLUSH write waits for the disk before FLUSH_DISK_TIMEOUT.",
)
@click.option(
    "--auto-create-topics/--no-auto-create-topics",
    envvar="SKIFF_AUTO_CREATE_TOPICS",
    default=False,
    show_default=True,
    help="Create unknown topics on first use instead of answering TOPIC_NOT_FOUND.",
)
@click.option(
    "--default-read-queues",
    envvar="SKIFF_DEFAULT_READ_QUEUES",
    type=click.IntRange(1, 1024),
    default=_BROKER_DEFAULTS.default_read_queues,
    show_default=True,
    help="Read queues of a topic created without counts (--auto-create-topics; RocketMQ's "
    "defaultTopicQueueNums).",
)
@click.option(
    "--default-write-queues",
    envvar="SKIFF_DEFAULT_WRITE_QUEUES",
    type=click.IntRange(1, 1024),
    default=_BROKER_DEFAULTS.default_write_queues,
    show_default=True,
    help="Write queues of a topic created without counts.",
)
@click.option(
    "--max-delivery-attempts",
    envvar="SKIFF_MAX_DELIVERY_ATTEMPTS",
    type=click.IntRange(1),
    default=17,
    show_default=True,
    help="Deliveries of a message before it goes to %DLQ%<group>.",
)
@click.option(
    "--transaction-check-interval",
    envvar="SKIFF_TRANSACTION_CHECK_INTERVAL",
    type=click.FloatRange(0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds between asks to a producer about an unresolved transaction.",
)
@click.option(
    "--transaction-timeout",
    envvar="SKIFF_TRANSACTION_TIMEOUT",
    type=click.FloatRange(0),
    default=6.0,
    show_default=True,
    help="Seconds an unresolved transaction waits before its producer is asked.",
)
@click.option(
    "--transaction-check-max",
    envvar="SKIFF_TRANSACTION_CHECK_MAX",
    type=click.IntRange(0),
    default=15,
    show_default=True,
    help="Asks about one transaction before it is rolled back.",
)
@click.option(
    "--role",
    envvar="SKIFF_ROLE",
    type=click.Choice(["MASTER", "REPLICA", "AUTO", "LEASE"], case_sensitive=False),
    default="MASTER",
    show_default=True,
    help="AUTO: MASTER for StatefulSet ordinal 0 (SKIFF_POD_NAME or HOSTNAME), else REPLICA. "
    "LEASE: the holder of the group's Kubernetes Lease is the master.",
)
@click.option(
    "--cluster",
    "cluster_name",
    envvar="SKIFF_CLUSTER",
    default="",
    help="The cluster (Broker resource) this group belongs to; its groups' Leases carry it.",
)
@click.option(
    "--namespace",
    envvar="SKIFF_NAMESPACE",
    default="",
    help="Kubernetes namespace of the group's Lease (--role LEASE).",
)
@click.option(
    "--pod-name",
    envvar="SKIFF_POD_NAME",
    default="",
    help="This broker's pod (default: HOSTNAME); the Lease's holder identity.",
)
@click.option(
    "--kubeconfig",
    envvar="SKIFF_KUBECONFIG",
    default="",
    help="A kubeconfig to reach the API server with (default: the pod's service account).",
)
@click.option(
    "--lease-duration",
    envvar="SKIFF_LEASE_DURATION",
    type=click.IntRange(3),
    default=15,
    show_default=True,
    help="Seconds a Lease not renewed stays with its holder; the holder stops "
    "acknowledging writes after 2/3 of it.",
)
@click.option(
    "--ha-advertise",
    envvar="SKIFF_HA_ADVERTISE",
    default="",
    help="HOST:PORT replicas reach this broker's replication at when it is master "
    "(default: the --ha-listen address).",
)
@click.option(
    "--cluster-peers",
    envvar="SKIFF_CLUSTER_PEERS",
    default="",
    help="Other groups' client endpoints (HOST:PORT,HOST:PORT) outside Kubernetes; routes "
    "include the topic's queues on them.",
)
@click.option(
    "--external-listen",
    envvar="SKIFF_EXTERNAL_LISTEN",
    default="",
    help="A second client address; clients connecting there get the groups' external "
    "addresses (the <cluster>-endpoints ConfigMap) in routes.",
)
@click.option(
    "--master-address",
    envvar="SKIFF_MASTER_ADDRESS",
    default="",
    help="A replica's master: HOST:PORT of the master's --ha-listen.",
)
@click.option(
    "--ha-listen",
    envvar="SKIFF_HA_LISTEN",
    default="",
    help="Where a master serves replication (HOST:PORT; port 0 picks a free one). A MASTER "
    "serves none without it; other roles default to 0.0.0.0:10912.",
)
@click.option(
    "--ha-secret-file",
    envvar="SKIFF_HA_SECRET_FILE",
    default="",
    type=click.Path(dir_okay=False),
    help="File holding the group's replication secret (the same on every broker of the "
    "group; make one with: head -c 32 /dev/urandom | base64 > ha.secret). Without it "
    "the secret is read from SKIFF_HA_SECRET. Needed whenever replication is on.",
)
@click.option(
    "--replication-mode",
    envvar="SKIFF_REPLICATION_MODE",
    type=click.Choice(["ASYNC", "SYNC"], case_sensitive=False),
    default="ASYNC",
    show_default=True,
    help="SYNC acknowledges a write once --sync-replicas in-sync replicas hold it.",
)
@click.option(
    "--sync-replicas",
    envvar="SKIFF_SYNC_REPLICAS",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="In-sync replicas that must hold a write before a SYNC acknowledgement.",
)
@click.option(
    "--ha-max-gap",
    envvar="SKIFF_HA_MAX_GAP",
    type=ByteSize(),
    default="256m",
    show_default=True,
    help="A replica further behind than this is out of sync.",
)
@click.option(
    "--sync-replication-timeout",
    envvar="SKIFF_SYNC_REPLICATION_TIMEOUT",
    type=click.FloatRange(0, min_open=True),
    default=5.0,
    show_default=True,
    help="Seconds a SYNC write waits for replicas before SLAVE_PERSISTENCE_TIMEOUT.",
)
@click.option(
    "--ha-heartbeat-interval",
    envvar="SKIFF_HA_HEARTBEAT_INTERVAL",
    type=click.FloatRange(0, min_open=True),
    default=5.0,
    show_default=True,
    help="Seconds between heartbeats on an idle replication connection.",
)
@click.option(
    "--ha-heartbeat-timeout",
    envvar="SKIFF_HA_HEARTBEAT_TIMEOUT",
    type=click.FloatRange(0, min_open=True),
    default=20.0,
    show_default=True,
    help="Seconds without a word before a replication peer is taken for dead.",
)
@click.option(
    "--tls-mode",
    envvar="SKIFF_TLS_MODE",
    type=click.Choice(["disabled", "permissive", "enforcing"], case_sensitive=False),
    default="permissive",
    show_default=True,
    help="TLS on the client port(s): permissive serves TLS and plaintext on the same port, "
    "enforcing only TLS (plaintext connections are closed and logged), disabled only "
    "plaintext.",
)
@click.option(
    "--tls-cert",
    envvar="SKIFF_TLS_CERT",
    default="",
    help="PEM certificate (chain) for TLS, re-read when it changes; without it the broker "
    "makes a self-signed one in <data-dir>/tls/.",
)
@click.option(
    "--tls-key",
    envvar="SKIFF_TLS_KEY",
    default="",
    help="PEM private key of --tls-cert, re-read when it changes.",
)
@click.option(
    "--tls-ca",
    envvar="SKIFF_TLS_CA",
    default="",
    help="PEM CA bundle this cluster's brokers trust for each other: calls to other brokers "
    "use TLS verified against it, and replication runs over mutual TLS (with --tls-cert, "
    "which must carry the DNS name skiff-broker). Needed with --tls-mode enforcing when "
    "the broker has peers.",
)
@click.option(
    "--discard-damaged-state",
    envvar="SKIFF_DISCARD_DAMAGED_STATE",
    is_flag=True,
    default=False,
    help="When a state file under config/ and its .bak are both damaged, start with that "
    "state empty (the file is kept as <file>.damaged) instead of refusing to start.",
)
@click.option(
    "--auth",
    "auth_mode",
    envvar="SKIFF_AUTH",
    type=click.Choice(["enabled", "disabled"], case_sensitive=False),
    default="disabled",
    show_default=True,
    help="enabled: every request must be signed by a known user (RocketMQ's MQv2-HMAC-SHA1) "
    "and allowed by its ACL; disabled: requests are served unchecked.",
)
@click.option(
    "--auth-init-user",
    envvar="SKIFF_AUTH_INIT_USER",
    default="",
    help="ACCESS_KEY:SECRET_KEY of a super user created (or reset) at every start, to "
    "bootstrap users and ACLs (env SKIFF_AUTH_INIT_USER, which keeps it out of `ps`).",
)
@click.option(
    "--auth-clock-skew",
    envvar="SKIFF_AUTH_CLOCK_SKEW",
    type=float,
    default=900.0,
    show_default=True,
    help="Seconds a request's signing time may be from the broker's clock.",
)
def broker(
    data_dir: str,
    listen: str,
    metrics_listen: str,
    advertise: str,
    broker_name: str,
    flush_type: str,
    transient_store_pool: bool,
    commit_log_file_size: int,
    max_message_size: int,
    consume_queue_file_entries: int,
    index_file_entries: int,
    index_hash_slots: int,
    file_reserved_hours: float,
    clean_file_forcibly: bool,
    delete_when: str,
    sync_flush_timeout: float,
    auto_create_topics: bool,
    default_read_queues: int,
    default_write_queues: int,
    max_delivery_attempts: int,
    transaction_check_interval: float,
    transaction_timeout: float,
    transaction_check_max: int,
    role: str,
    cluster_name: str,
    namespace: str,
    pod_name: str,
    kubeconfig: str,
    lease_duration: int,
    ha_advertise: str,
    cluster_peers: str,
    external_listen: str,
    master_address: str,
    ha_listen: str,
    ha_secret_file: str,
    replication_mode: str,
    sync_replicas: int,
    ha_max_gap: int,
    sync_replication_timeout: float,
    ha_heartbeat_interval: float,
    ha_heartbeat_timeout: float,
    tls_mode: str,
    tls_cert: str,
    tls_key: str,
    tls_ca: str,
    discard_damaged_state: bool,
    auth_mode: str,
    auth_init_user: str,
    auth_clock_skew: float,
) -> None:
    """Run a broker on a local data directory until SIGTERM or Ctrl-C.

    A start that fails prints one line saying why and what to do, and exits 1.
    """
    import asyncio

    from .auth.config import AuthConfig
    from .cluster.config import ClusterConfig
    from .ha.config import ReplicationConfig, ReplicationMode, Role
    from .ha.epoch_file import EpochFileError
    from .ha.replica_book import ReplicaBookError
    from .ha.role_file import RoleFileError
    from .ha.successor_check import SupersededMaster
    from .metadata.state_file import StateFileError
    from .server.app import BrokerServer
    from .store.errors import StoreError
    from .tls.settings import TlsConfig, TlsMode

    store_config = StoreConfig(
        data_dir=os.path.abspath(data_dir),
        flush_type=FlushType(flush_type),
        transient_store_pool_enable=transient_store_pool,
        commit_log_file_size=commit_log_file_size,
        max_message_size=max_message_size,
        consume_queue_units_per_file=consume_queue_file_entries,
        max_index_num=index_file_entries,
        # RocketMQ's proportions unless chosen: a hash slot for every four keys.
        max_hash_slot_num=index_hash_slots or max(1, index_file_entries // 4),
        file_reserved_time_hours=file_reserved_hours,
        clean_file_forcibly_enable=clean_file_forcibly,
        delete_when=delete_when,
        sync_flush_timeout=sync_flush_timeout,
        store_host=advertise or _store_host(listen),
    )
    config = BrokerConfig(
        store=store_config,
        broker_name=broker_name,
        listen=listen,
        metrics_listen=metrics_listen.strip(),
        advertised_endpoint=advertise,
        auto_create_topics=auto_create_topics,
        default_read_queues=default_read_queues,
        default_write_queues=default_write_queues,
        max_delivery_attempts=max_delivery_attempts,
        transaction_check_interval_ms=int(transaction_check_interval * 1000),
        transaction_timeout_ms=int(transaction_timeout * 1000),
        transaction_check_max=transaction_check_max,
        discard_damaged_state=discard_damaged_state,
        replication=ReplicationConfig(
            role=Role(role.upper()),
            master_address=master_address,
            ha_listen=ha_listen,
            secret=_ha_secret(ha_secret_file),
            mode=ReplicationMode(replication_mode.upper()),
            sync_replicas=sync_replicas,
            max_gap=ha_max_gap,
            sync_timeout=sync_replication_timeout,
            heartbeat_interval=ha_heartbeat_interval,
            heartbeat_timeout=ha_heartbeat_timeout,
        ),
        cluster=ClusterConfig(
            name=cluster_name,
            namespace=namespace,
            pod_name=pod_name or _pod_name(),
            kubeconfig=kubeconfig,
            lease_duration_s=lease_duration,
            ha_advertise=ha_advertise,
            peers=[p.strip() for p in cluster_peers.split(",") if p.strip()],
            external_listen=external_listen,
        ),
        tls=TlsConfig(
            mode=TlsMode(tls_mode.lower()),
            cert_file=os.path.abspath(tls_cert) if tls_cert else "",
            key_file=os.path.abspath(tls_key) if tls_key else "",
            ca_file=os.path.abspath(tls_ca) if tls_ca else "",
        ),
        auth=AuthConfig(
            enabled=auth_mode.lower() == "enabled",
            init_user=auth_init_user,
            max_clock_skew_s=auth_clock_skew,
        ),
    )
    try:
        config.replication.resolve_role(pod_name or _pod_name())
        config.validate()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        # Before the data directory is opened: a busy port then changes nothing on disk.
        for address, option in _addresses_to_serve(config):
            check_can_listen(address, option)
    except PortUnavailable as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(USAGE_EXIT_CODE)
    try:
        server = BrokerServer(config)
        asyncio.run(server.serve_until_signalled(on_listening=lambda: _announce(server)))
    except (
        StoreError,
        OSError,
        EpochFileError,
        StateFileError,
        RoleFileError,
        ReplicaBookError,
        SupersededMaster,
    ) as exc:
        raise click.ClickException(_one_line(str(exc))) from exc
    except Exception as exc:
        # Anything else is a fault of the broker: one line here, the traceback at DEBUG.
        log.debug("the broker stopped on an unexpected error", exc_info=True)
        raise click.ClickException(
            f"the broker stopped on an unexpected error: {type(exc).__name__}: "
            f"{_one_line(str(exc))} (run with --log-level DEBUG for the traceback, and "
            "report it)"
        ) from exc


def _ha_secret(path: str) -> bytes:
    """The replication secret: the file's contents, else SKIFF_HA_SECRET (surrounding
    whitespace dropped, so a trailing newline does not matter)."""
    if not path:
        return os.environ.get("SKIFF_HA_SECRET", "").strip().encode()
    try:
        with open(path, "rb") as secret_file:
            return secret_file.read().strip()
    except OSError as exc:
        raise click.UsageError(
            f"cannot read --ha-secret-file {path}: {exc.strerror}; check the path and that "
            "this user may read it"
        ) from None


# click's code for a usage error: the command line (here an address) must change.
USAGE_EXIT_CODE = 2


def _addresses_to_serve(config: BrokerConfig) -> list[tuple[str, str]]:
    """Each address the broker will listen on at start, with the option that sets it."""
    from .ha.config import Role

    addresses = [(config.listen, "--listen")]
    if config.cluster.external_listen:
        addresses.append((config.cluster.external_listen, "--external-listen"))
    if config.metrics_listen:
        addresses.append((config.metrics_listen, "--metrics-listen"))
    # A master serves replication from the start; other roles only once promoted.
    if config.replication.role is Role.MASTER and config.replication.ha_listen:
        addresses.append((config.replication.ha_listen, "--ha-listen"))
    return addresses


def _announce(server: BrokerServer) -> None:
    """Where the broker is and what to try next: a banner on a terminal, else a log line."""
    # A wildcard listen address is reached on this host at 127.0.0.1.
    endpoint = _store_host(server.address)
    data_dir = server.config.store.data_dir
    try_next = f"skiff topic create demo --endpoint {endpoint}"
    if sys.stderr.isatty():
        click.echo(
            f"\nSkiff broker {__version__} is ready\n"
            f"  endpoint:        {endpoint}\n"
            f"  data directory:  {data_dir}\n"
            f"  try next:        {try_next}\n"
            f"                   skiff send --topic demo --body hello --endpoint {endpoint}\n"
            "  stop with Ctrl-C\n",
            err=True,
        )
    else:
        log.info("ready: endpoint %s, data directory %s; try: %s", endpoint, data_dir, try_next)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _pod_name() -> str:
    """The StatefulSet pod's name, for --role AUTO."""
    import socket

    return os.environ.get("SKIFF_POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname()


def _store_host(listen: str) -> str:
    """STOREHOST for records: the listen address, with a wildcard host made concrete."""
    host, _, port = listen.rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"{host}:{port or 0}"


register_client_commands(main)


@main.group()
def store() -> None:
    """Inspect a data directory offline."""


@store.command("check")
@click.option(
    "--data-dir",
    envvar="SKIFF_DATA_DIR",
    default="./skiff-data",
    show_default=True,
    type=click.Path(file_okay=False, exists=True),
)
@click.option(
    "--commit-log-file-size",
    envvar="SKIFF_COMMIT_LOG_FILE_SIZE",
    type=ByteSize(),
    default=None,
    help="Segment size; read from the segment files when left out.",
)
@click.option(
    "--repair",
    is_flag=True,
    help="Recover the stopped directory as after a crash: skip damaged records, cut a torn "
    "tail, rebuild consume-queue units that disagree with the log.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def store_check(
    data_dir: str, commit_log_file_size: int | None, repair: bool, as_json: bool
) -> None:
    """Verify every commit-log record and consume-queue unit; show the damage report.

    Exits 1 if it finds damage not yet handled (in the report), a torn tail or
    consume-queue units that disagree with the log; --repair fixes those.
    """
    from .store import store_check as checker
    from .store.errors import StoreError

    try:
        if repair:
            repaired = checker.repair(data_dir, commit_log_file_size)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if repair and not as_json:
        _print_repair(repaired)
    try:
        outcome = checker.check(data_dir, commit_log_file_size)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        result = outcome.as_json()
        if repair:
            result["repair"] = repaired.as_json()
        click.echo(json.dumps(result))
    else:
        _print_check(outcome)
    sys.exit(0 if outcome.ok else 1)


def _print_repair(repaired: RepairOutcome) -> None:
    click.echo(
        f"repair: commit log ends at {repaired.end}" + (" (torn tail cut)" if repaired.cut else "")
    )
    for d in repaired.skipped:
        click.echo(f"repair: skipped {d['length']} bytes at {d['offset']}: {d['reason']}")
    click.echo(
        f"repair: {repaired.units_bad} consume-queue unit(s) disagreed with the log, "
        f"{repaired.units_rebuilt} rebuilt, {repaired.units_bad - repaired.units_rebuilt} "
        "left as holes readers step over"
    )
    if repaired.index_left_to_next_start:
        click.echo("repair: the index is rebuilt by the broker's next start")


def _print_check(outcome: CheckOutcome) -> None:
    click.echo(
        f"{outcome.records} records in {outcome.segments} segments of {outcome.segment_size} "
        f"bytes; valid data ends at {outcome.valid_end}"
    )
    if outcome.problem:
        click.echo(f"problem: torn tail, {outcome.problem}; run with --repair to cut it")
    for d in outcome.damaged:
        state = "in the report" if d["known"] else "NEW, run with --repair to record it"
        click.echo(f"damaged: {d['length']} bytes at {d['offset']} ({state}): {d['reason']}")
    click.echo(f"{outcome.units_checked} consume-queue units checked against the log")
    for queue, count in outcome.bad_units.items():
        click.echo(f"problem: {count} unit(s) of {queue} disagree with the log; run with --repair")
    if outcome.report:
        click.echo(f"damage report ({len(outcome.report)} entries):")
        for e in outcome.report:
            if e.get("kind") == "skipped":
                click.echo(
                    f"  {e['at']} {e['found_by']}: skipped {e['records']} record(s), "
                    f"{e['length']} bytes at {e['offset']} ({e['reason']}); copy in {e['copy']}"
                )
            elif e.get("kind") == "consume-queue":
                click.echo(
                    f"  {e['at']} {e['found_by']}: {e['topic']}/{e['queue_id']}: "
                    f"{e['bad_units']} bad unit(s), {e['rebuilt']} rebuilt, {e['holes']} holes "
                    f"({e['reason']})"
                )
            else:
                click.echo(f"  {e}")
    click.echo("store is consistent" if outcome.ok else "store has problems (exit status 1)")
