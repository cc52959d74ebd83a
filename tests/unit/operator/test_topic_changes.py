"""The safe order of topic queue-count changes, and the operator's small pure pieces."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.client.admin import MessageType, Permission, Topic
from skiff_operator.broker_endpoints import EndpointResolver
from skiff_operator.conditions import ready_condition, with_condition
from skiff_operator.topic_changes import plan_topic_change
from skiff_operator.topic_handlers import desired_topic


def topic(read: int, write: int, perm: Permission = Permission.READ_WRITE) -> Topic:
    return Topic("orders", read, write, perm, MessageType.NORMAL)


def test_a_missing_topic_is_created_as_desired() -> None:
    assert plan_topic_change(None, topic(8, 8)) == [topic(8, 8)]


def test_nothing_to_do_when_equal() -> None:
    assert plan_topic_change(topic(8, 8), topic(8, 8)) == []


def test_growing_raises_read_queues_before_write_queues() -> None:
    assert plan_topic_change(topic(4, 4), topic(8, 8)) == [topic(8, 4), topic(8, 8)]


def test_shrinking_lowers_write_queues_before_read_queues() -> None:
    assert plan_topic_change(topic(8, 8), topic(4, 4)) == [topic(8, 4), topic(4, 4)]


def test_permission_changes_with_the_first_step() -> None:
    steps = plan_topic_change(topic(4, 4), topic(8, 8, Permission.READ))
    assert steps == [topic(8, 4, Permission.READ), topic(8, 8, Permission.READ)]


counts = st.integers(min_value=1, max_value=64)


@given(counts, counts, counts, counts)
def test_every_step_keeps_writes_within_reads(r0: int, w0: int, r1: int, w1: int) -> None:
    current = topic(max(r0, w0), min(r0, w0))
    desired = topic(max(r1, w1), min(r1, w1))
    steps = plan_topic_change(current, desired)
    assert (steps[-1] if steps else current) == desired
    for step in steps:
        assert step.write_queues <= step.read_queues
    # Read queues only shrink in the last step, after writes have reached their target.
    for earlier, later in zip([current, *steps], steps, strict=False):
        if later.read_queues < earlier.read_queues:
            assert later is steps[-1]
            assert earlier.write_queues == desired.write_queues


def test_topic_spec_maps_to_the_admin_topic() -> None:
    wanted = desired_topic(
        "payments",
        {
            "topicName": "Payments_FIFO",
            "readQueues": 4,
            "writeQueues": 2,
            "permission": "READ",
            "messageType": "FIFO",
        },
    )
    assert wanted == Topic("Payments_FIFO", 4, 2, Permission.READ, MessageType.FIFO)
    assert desired_topic("plain", {}).name == "plain"


def test_endpoint_resolver_defaults_to_the_group_client_service() -> None:
    # The client Service follows the Lease holder; ordinal 0 is no longer the master.
    resolver = EndpointResolver()
    assert resolver.master_endpoint("shop", "orders", 1) == ("orders-b.shop.svc.cluster.local:8081")
    local = EndpointResolver("127.0.0.1:{port}")
    assert local.master_endpoint("shop", "orders", 0) == "127.0.0.1:8081"


def test_a_bad_endpoint_template_says_which_fields_exist() -> None:
    with pytest.raises(ValueError, match=r"\{client_service_dns_name\}"):
        EndpointResolver("{nonsense}:1").master_endpoint("shop", "orders", 0)


def test_ready_condition_keeps_its_transition_time_while_unchanged() -> None:
    first = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    later = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    ready = ready_condition(True, "Ready", "ok", 1, (), now=first)
    again = ready_condition(True, "Ready", "still ok", 2, [ready], now=later)
    assert again["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    flipped = ready_condition(False, "PodsNotReady", "0/1", 2, [again], now=later)
    assert flipped["lastTransitionTime"] == "2026-01-02T00:00:00Z"
    other = {"type": "Progressing", "status": "True"}
    assert with_condition([other, ready], flipped) == [other, flipped]
