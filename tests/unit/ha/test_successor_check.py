"""Which former replica's answer stops a master's start, and the line it exits with.

The answers are built by hand; the calls themselves run against real brokers in
tests/integration/test_replication.py. Asking a closed port is real here.
"""

from __future__ import annotations

import socket

import pytest

from skiff_broker.ha.successor_check import (
    PeerAnswer,
    ask_peers,
    check_not_superseded,
    refusal,
    successor,
)


def answer(role: str, epoch: int, *, group: str = "a", endpoint: str = "h1:8082") -> PeerAnswer:
    return PeerAnswer(
        endpoint=endpoint,
        broker_name=group,
        role=role,
        epoch=epoch,
        ha_address="h1:10913" if role == "MASTER" else "",
        master_address="" if role == "MASTER" else "h1:10913",
    )


def test_only_a_newer_term_of_the_same_group_supersedes() -> None:
    assert successor("a", 3, [answer("MASTER", 3), answer("REPLICA", 2)]) is None
    assert successor("a", 3, [answer("MASTER", 4, group="b")]) is None
    master = answer("MASTER", 4)
    follower = answer("REPLICA", 4, endpoint="h2:8083")
    assert successor("a", 3, [follower, master]) == master
    assert successor("a", 3, [follower]) == follower


def test_the_refusal_names_the_new_master_its_epoch_and_how_to_rejoin() -> None:
    line = refusal("a", 1, answer("MASTER", 2))
    assert "broker h1:8082 was promoted to master of group a at epoch 2" in line
    assert line.endswith("start it with --role REPLICA --master-address h1:10913")
    assert "\n" not in line

    promoted_before = refusal("a", 2, answer("MASTER", 3), role_file="/data/role")
    assert "delete /data/role and start it with --role REPLICA" in promoted_before

    via_replica = refusal("a", 1, answer("REPLICA", 2))
    assert "follows a master of epoch 2 at h1:10913" in via_replica
    assert via_replica.endswith("--master-address h1:10913")


def test_no_remembered_peer_asks_nobody() -> None:
    assert ask_peers({}) == ([], {})
    check_not_superseded("a", 1, {})


def test_a_peer_that_does_not_answer_blocks_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{probe.getsockname()[1]}"
    answers, silent = ask_peers({"gone": closed}, timeout=2.0)
    assert answers == [] and list(silent) == [closed]
    check_not_superseded("a", 1, {"gone": closed})
    assert f"not reachable, so not asked whether one was promoted: {closed}" in caplog.text
