"""Replication settings: AUTO roles from pod names, and refusals that say what to change."""

from __future__ import annotations

import pytest

from skiff_broker.ha.config import ReplicationConfig, ReplicationMode, Role, role_from_pod_name

SECRET = b"a-secret-of-the-group-0123456789"


@pytest.mark.parametrize(
    ("pod_name", "role"),
    [
        ("skiff-a-0", Role.MASTER),
        ("skiff-a-1", Role.REPLICA),
        ("skiff-a-2", Role.REPLICA),
        ("orders-broker-10", Role.REPLICA),
    ],
)
def test_auto_role_follows_the_statefulset_ordinal(pod_name: str, role: Role) -> None:
    assert role_from_pod_name(pod_name) is role
    config = ReplicationConfig(
        role=Role.AUTO, master_address="skiff-a-0.skiff-a:10912", secret=SECRET
    )
    config.resolve_role(pod_name)
    assert config.role is role
    # A group's master serves replication even though no --ha-listen was given.
    assert config.ha_listen == "0.0.0.0:10912"
    config.validate()


@pytest.mark.parametrize("pod_name", ["skiff", "skiff-a", "skiff-a-x", ""])
def test_a_pod_name_without_an_ordinal_is_refused(pod_name: str) -> None:
    with pytest.raises(ValueError, match="SKIFF_POD_NAME"):
        role_from_pod_name(pod_name)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"role": Role.REPLICA, "secret": SECRET}, "set --master-address"),
        (
            {"role": Role.REPLICA, "master_address": "nohost", "secret": SECRET},
            "--master-address must be HOST:PORT",
        ),
        ({"ha_listen": "10912", "secret": SECRET}, "--ha-listen must be HOST:PORT"),
        ({"role": Role.REPLICA, "master_address": "m:10912"}, "head -c 32 /dev/urandom"),
        ({"role": Role.LEASE}, "--ha-secret-file"),
        ({"ha_listen": "127.0.0.1:0"}, "SKIFF_HA_SECRET"),
        ({"ha_listen": "127.0.0.1:0", "secret": b"short"}, "is too short"),
        ({"mode": ReplicationMode.SYNC}, "set --ha-listen"),
        ({"sync_replicas": 0}, "--sync-replicas"),
        ({"max_gap": 0}, "--ha-max-gap"),
        ({"sync_timeout": 0}, "--sync-replication-timeout"),
        (
            {"heartbeat_interval": 30, "heartbeat_timeout": 20},
            "shorter than --ha-heartbeat-timeout",
        ),
    ],
)
def test_bad_settings_are_refused_with_what_to_change(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReplicationConfig(**settings).validate()


def test_a_plain_master_has_no_replication_and_needs_no_secret() -> None:
    config = ReplicationConfig()
    config.resolve_role("")
    assert not config.enabled
    assert config.ha_listen == ""
    config.validate()


def test_defaults_follow_rocketmq() -> None:
    config = ReplicationConfig()
    assert (config.role, config.mode) == (Role.MASTER, "ASYNC")
    assert config.max_gap == 256 * 1024 * 1024
    assert (config.sync_timeout, config.heartbeat_interval, config.heartbeat_timeout) == (5, 5, 20)
    config.validate()
