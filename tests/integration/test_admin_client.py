"""The typed admin client (what the operator uses) against a real broker process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess, running_broker

from skiff_broker.client.admin import AdminClient, MessageType, Permission, Topic
from skiff_broker.client.errors import (
    AlreadyExists,
    BrokerUnavailable,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage

broker = module_broker("admin-client")


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[AdminClient]:
    with AdminClient(broker.endpoint) as client:
        yield client


def test_topics_are_typed_values(admin):
    created = admin.create_topic(
        "ac-orders", read_queues=4, perm=Permission.READ_WRITE, message_type=MessageType.FIFO
    )
    assert created == Topic("ac-orders", 4, 4, Permission.READ_WRITE, MessageType.FIFO)
    assert admin.get_topic("ac-orders") == created
    assert created in admin.list_topics()
    assert admin.update_topic("ac-orders", perm=Permission.READ) == Topic(
        "ac-orders", 4, 4, Permission.READ, MessageType.FIFO
    )


def test_apply_creates_then_converges_and_is_idempotent(admin):
    wanted = Topic("ac-applied", 2, 2, Permission.READ_WRITE, MessageType.NORMAL)
    assert admin.apply_topic(wanted) == wanted
    assert admin.apply_topic(wanted) == wanted
    grown = Topic("ac-applied", 6, 6, Permission.READ_WRITE, MessageType.NORMAL)
    assert admin.apply_topic(grown) == grown
    assert admin.get_topic("ac-applied") == grown


def test_broker_errors_are_typed_with_the_reason(admin, broker):
    admin.create_topic("ac-errors", read_queues=2)
    with pytest.raises(AlreadyExists, match="already exists"):
        admin.create_topic("ac-errors")
    with pytest.raises(InvalidArgument, match="would never be read"):
        admin.update_topic("ac-errors", write_queues=4)
    with pytest.raises(InvalidArgument, match="contains illegal characters"):
        admin.create_topic("no spaces allowed")
    with pytest.raises(NotFound, match="'ac-missing' does not exist"):
        admin.get_topic("ac-missing")
    with pytest.raises(NotFound):
        admin.delete_topic("ac-missing")

    with MessagingClient(broker.endpoint) as messaging:
        for _ in range(2):  # one per request: round-robin puts them in queues 0 and 1
            messaging.send([OutgoingMessage("ac-errors", b"x")])
    admin.update_topic("ac-errors", write_queues=1)
    with pytest.raises(FailedPrecondition, match="queue 1 holds 1 message and"):
        admin.update_topic("ac-errors", read_queues=1)


def test_an_unreachable_broker_is_its_own_error(tmp_path):
    with running_broker(tmp_path) as gone:
        endpoint = gone.endpoint
    with AdminClient(endpoint, timeout=5) as client, pytest.raises(BrokerUnavailable):
        client.list_topics()
