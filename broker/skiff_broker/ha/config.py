"""Typed settings of replication; defaults follow RocketMQ's broker and store config.

Replication is on for a broker whose role is not MASTER (a replica, AUTO, LEASE), or a
MASTER given --ha-listen; a plain MASTER opens no replication port. Replication that is
on needs the group's shared secret (:mod:`.peer_auth`): without one the broker does
not start.
"""

from __future__ import annotations

import dataclasses
import enum
import re

from ..wire.setting import option
from .peer_auth import MAKE_SECRET_HINT, MIN_SECRET_BYTES

MiB = 1024**2


class Role(enum.StrEnum):
    MASTER = "MASTER"
    REPLICA = "REPLICA"
    AUTO = "AUTO"
    # The group's Kubernetes Lease decides: its holder is the master.
    LEASE = "LEASE"


class ReplicationMode(enum.StrEnum):
    # The master acknowledges after its own append (and flush, under SYNC_FLUSH).
    ASYNC = "ASYNC"
    # ... and only once enough in-sync replicas hold the bytes.
    SYNC = "SYNC"


# Where a broker serves replication when replication is on and --ha-listen is not given
# (RocketMQ's haListenPort). Peers on other hosts must reach it; the secret keeps others out.
DEFAULT_HA_LISTEN = "0.0.0.0:10912"

_ORDINAL = re.compile(r"-(\d+)$")


def role_from_pod_name(pod_name: str) -> Role:
    """A StatefulSet pod's role: ordinal 0 is the master, every other ordinal a replica."""
    match = _ORDINAL.search(pod_name)
    if match is None:
        raise ValueError(
            f"--role AUTO needs a StatefulSet pod name ending in -<ordinal> (like skiff-a-0), "
            f"got {pod_name!r}; set SKIFF_POD_NAME or choose --role MASTER or REPLICA"
        )
    return Role.MASTER if int(match.group(1)) == 0 else Role.REPLICA


def parse_host_port(value: str, option: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{option} must be HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


@dataclasses.dataclass(slots=True)
class ReplicationConfig:
    """Durations are seconds; sizes are bytes."""

    role: Role = option(
        Role.MASTER,
        "--role",
        "SKIFF_ROLE",
        "AUTO: MASTER for StatefulSet ordinal 0 (SKIFF_POD_NAME or HOSTNAME), else REPLICA. "
        "LEASE: the holder of the group's Kubernetes Lease is the master.",
    )
    master_address: str = option(
        "",
        "--master-address",
        "SKIFF_MASTER_ADDRESS",
        "A replica's master: HOST:PORT of the master's --ha-listen.",
    )
    # "" on a MASTER: no replication at all.
    ha_listen: str = option(
        "",
        "--ha-listen",
        "SKIFF_HA_LISTEN",
        "Where a master serves replication (HOST:PORT; port 0 picks a free one). A MASTER "
        "serves none without it; other roles default to 0.0.0.0:10912.",
    )
    # Where `skiff broker` reads ``secret`` from at start; a file keeps it out of `ps`.
    secret_file: str = option(
        "",
        "--ha-secret-file",
        "SKIFF_HA_SECRET_FILE",
        "File holding the group's replication secret (the same on every broker of the "
        "group; make one with: head -c 32 /dev/urandom | base64 > ha.secret). Without it "
        "the secret is read from SKIFF_HA_SECRET. Needed whenever replication is on.",
        kind="file",
    )
    # The group's shared secret; every peer proves it holds it before any log byte flows.
    secret: bytes = b""
    mode: ReplicationMode = option(
        ReplicationMode.ASYNC,
        "--replication-mode",
        "SKIFF_REPLICATION_MODE",
        "SYNC acknowledges a write once --sync-replicas in-sync replicas hold it.",
    )
    sync_replicas: int = option(
        1,
        "--sync-replicas",
        "SKIFF_SYNC_REPLICAS",
        "In-sync replicas that must hold a write before a SYNC acknowledgement.",
        minimum=1,
    )
    # RocketMQ: haMaxGapNotInSync.
    max_gap: int = option(
        256 * MiB,
        "--ha-max-gap",
        "SKIFF_HA_MAX_GAP",
        "A replica further behind than this is out of sync.",
        kind="size",
    )
    # RocketMQ: syncFlushTimeout, 5 s.
    sync_timeout: float = option(
        5.0,
        "--sync-replication-timeout",
        "SKIFF_SYNC_REPLICATION_TIMEOUT",
        "Seconds a SYNC write waits for replicas before SLAVE_PERSISTENCE_TIMEOUT.",
        minimum=0,
        min_open=True,
    )
    # RocketMQ: haSendHeartbeatInterval; both ends send one.
    heartbeat_interval: float = option(
        5.0,
        "--ha-heartbeat-interval",
        "SKIFF_HA_HEARTBEAT_INTERVAL",
        "Seconds between heartbeats on an idle replication connection.",
        minimum=0,
        min_open=True,
    )
    # RocketMQ: haHousekeepingInterval.
    heartbeat_timeout: float = option(
        20.0,
        "--ha-heartbeat-timeout",
        "SKIFF_HA_HEARTBEAT_TIMEOUT",
        "Seconds without a word before a replication peer is taken for dead.",
        minimum=0,
        min_open=True,
    )
    # Largest run of log bytes sent in one frame.
    transfer_batch_bytes: int = 1 * MiB
    # Topic config and consumer offsets are sent to replicas this often when changed.
    metadata_interval: float = 1.0

    @property
    def enabled(self) -> bool:
        """Whether this broker takes part in replication (serves or follows a log)."""
        return self.role is not Role.MASTER or bool(self.ha_listen)

    def resolve_role(self, pod_name: str) -> None:
        """Turn AUTO into MASTER or REPLICA from the pod name; pick the replication address.

        A broker in a group (any role but a plain MASTER) may serve replication one day
        (as master, or once promoted), so it gets the default address if none was given.
        """
        if self.enabled and not self.ha_listen:
            self.ha_listen = DEFAULT_HA_LISTEN
        if self.role is Role.AUTO:
            self.role = role_from_pod_name(pod_name)

    def validate(self) -> None:
        """Raise ValueError with a sentence that says what to change."""
        if self.ha_listen:
            parse_host_port(self.ha_listen, "--ha-listen")
        if self.enabled and len(self.secret) < MIN_SECRET_BYTES:
            why = "is too short" if self.secret else "is not set"
            raise ValueError(
                f"replication needs the group's shared secret (at least {MIN_SECRET_BYTES} "
                f"bytes), and it {why}: {MAKE_SECRET_HINT}"
            )
        if self.mode is ReplicationMode.SYNC and not self.enabled:
            raise ValueError(
                "SYNC replication waits for replicas, and this master serves none: set "
                "--ha-listen HOST:PORT for them to connect to, or choose --replication-mode ASYNC"
            )
        if self.role is Role.REPLICA and not self.master_address:
            raise ValueError(
                "a replica needs its master's replication address: "
                "set --master-address HOST:PORT (SKIFF_MASTER_ADDRESS)"
            )
        if self.master_address:
            parse_host_port(self.master_address, "--master-address")
        if self.sync_replicas < 1:
            raise ValueError("--sync-replicas must be at least 1")
        if self.max_gap < 1:
            raise ValueError("--ha-max-gap must be positive, e.g. 256m")
        if self.sync_timeout <= 0:
            raise ValueError("--sync-replication-timeout must be positive")
        if not 0 < self.heartbeat_interval < self.heartbeat_timeout:
            raise ValueError(
                "--ha-heartbeat-interval must be positive and shorter than --ha-heartbeat-timeout"
            )
