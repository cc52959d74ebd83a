import os

import pytest
from tests.unit.admin.runtime_messages import ack, consume, put, receive

from skiff_broker.admin.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from skiff_broker.admin.topic_admin import TopicAdmin, TopicChange
from skiff_broker.metadata.topic_table import MessageType, Permission, TopicConfig, TopicTable
from skiff_broker.wire import property_names as prop


def test_created_topic_is_persisted_and_listed(broker):
    admin = TopicAdmin(broker)
    admin.create(TopicConfig("orders", 4, 2, Permission.READ, MessageType.FIFO))
    admin.create(TopicConfig("audit", 1, 1))

    assert [t.name for t in admin.list()] == ["audit", "orders"]
    on_disk = TopicTable(os.path.join(broker.config.store.config_dir, "topics.json"))
    on_disk.load()
    assert on_disk.get("orders") == TopicConfig("orders", 4, 2, Permission.READ, MessageType.FIFO)


def test_creating_an_existing_topic_is_refused_and_keeps_it(broker):
    admin = TopicAdmin(broker)
    admin.create(TopicConfig("orders", 4, 4))
    with pytest.raises(AlreadyExists, match="already exists"):
        admin.create(TopicConfig("orders", 1, 1))
    assert admin.get("orders").read_queue_nums == 4


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        (TopicConfig("bad name", 1, 1), "contains illegal characters"),
        (TopicConfig("t", 0, 0), "between 1 and 1024"),
        (TopicConfig("t", 2000, 2000), "between 1 and 1024"),
        (TopicConfig("t", 2, 4), "queues 2-3 would never be read"),
        (TopicConfig("t", 2, 3), "queues 2 would never be read"),
    ],
)
def test_invalid_topics_are_refused_with_a_reason(broker, topic, reason):
    with pytest.raises(InvalidArgument, match=reason):
        TopicAdmin(broker).create(topic)
    assert broker.topics.get(topic.name) is None


def test_update_changes_only_what_is_given(broker):
    admin = TopicAdmin(broker)
    admin.create(TopicConfig("orders", 4, 4))
    updated = admin.update("orders", TopicChange(perm=Permission.READ))
    assert updated == TopicConfig("orders", 4, 4, Permission.READ, MessageType.NORMAL)
    updated = admin.update("orders", TopicChange(read_queue_nums=8, message_type=MessageType.FIFO))
    assert updated == TopicConfig("orders", 8, 4, Permission.READ, MessageType.FIFO)
    assert broker.topics.get("orders") == updated


def test_unknown_topics_are_not_found(broker):
    admin = TopicAdmin(broker)
    for action in (
        lambda: admin.get("nope"),
        lambda: admin.update("nope", TopicChange(read_queue_nums=2)),
        lambda: admin.delete("nope"),
    ):
        with pytest.raises(NotFound, match="'nope' does not exist"):
            action()


def test_more_write_than_read_queues_is_refused_on_update(broker):
    admin = TopicAdmin(broker)
    admin.create(TopicConfig("orders", 4, 4))
    with pytest.raises(InvalidArgument, match="at least 6"):
        admin.update("orders", TopicChange(write_queue_nums=6))
    # Growing the read queues first, then the write queues, works.
    admin.update("orders", TopicChange(read_queue_nums=6))
    assert admin.update("orders", TopicChange(write_queue_nums=6)).write_queue_nums == 6


def test_shrinking_over_messages_no_group_consumed_is_refused(broker):
    admin = TopicAdmin(broker)
    admin.create(TopicConfig("orders", 4, 4))
    put(broker, "orders", 3, 5)
    admin.update("orders", TopicChange(write_queue_nums=2))  # always safe

    with pytest.raises(FailedPrecondition) as refused:
        admin.update("orders", TopicChange(read_queue_nums=2))
    message = str(refused.value)
    assert "queue 3 holds 5 messages" in message
    assert "queue 2" not in message  # empty: no reason to refuse over it
    assert "no consumer group" in message
    assert broker.topics.get("orders").read_queue_nums == 4


def test_messages_just_appended_block_a_shrink(any_broker):
    # Not yet dispatched to their queue (nor, with the pool, committed to the file).
    admin = TopicAdmin(any_broker)
    admin.create(TopicConfig("orders", 2, 1))
    put(any_broker, "orders", 1, 1, dispatched=False)
    with pytest.raises(FailedPrecondition, match="queue 1 holds 1 message and"):
        admin.update("orders", TopicChange(read_queue_nums=1))


def test_shrinking_is_allowed_once_every_group_consumed_the_dropped_queues(broker):
    admin = TopicAdmin(broker)
    admin.create(TopicConfig("orders", 4, 2))
    put(broker, "orders", 0, 2)
    put(broker, "orders", 3, 3)
    assert consume(broker, "fast", "orders", [0, 1, 2, 3]) == 5
    in_flight = receive(broker, "slow", "orders", [3])
    assert len(in_flight) == 3

    with pytest.raises(
        FailedPrecondition, match=r"queue 3 holds unconsumed messages \(3 for group 'slow'\)"
    ):
        admin.update("orders", TopicChange(read_queue_nums=2))

    # Acked, but only in the pop service's memory: the admin check must still see it.
    ack(broker, "slow", in_flight)
    assert admin.update("orders", TopicChange(read_queue_nums=2)).read_queue_nums == 2


def test_a_group_that_never_read_a_dropped_queue_blocks_the_shrink(broker):
    admin = TopicAdmin(broker)
    admin.create(TopicConfig("orders", 4, 2))
    put(broker, "orders", 0, 1)
    put(broker, "orders", 2, 1)
    assert consume(broker, "g", "orders", [0]) == 1

    with pytest.raises(
        FailedPrecondition, match=r"queue 2 holds unconsumed messages \(1 for group 'g'\)"
    ):
        admin.update("orders", TopicChange(read_queue_nums=2))


def test_messages_in_kept_queues_do_not_block_a_shrink(broker):
    admin = TopicAdmin(broker)
    admin.create(TopicConfig("orders", 4, 2))
    put(broker, "orders", 0, 3)
    put(broker, "orders", 1, 3)
    assert admin.update("orders", TopicChange(read_queue_nums=2)).read_queue_nums == 2


def test_delete_removes_config_queues_and_offsets(broker):
    admin = TopicAdmin(broker)
    admin.create(TopicConfig("orders", 2, 2))
    put(broker, "orders", 0, 3)
    assert consume(broker, "g", "orders", [0, 1]) == 3
    queue_dir = os.path.join(broker.config.store.consume_queue_dir, "orders")
    assert os.path.isdir(queue_dir)

    admin.delete("orders")

    assert broker.topics.get("orders") is None
    assert not os.path.exists(queue_dir)
    assert broker.offsets.groups_of("orders") == []
    assert broker.store.max_offset("orders", 0) == 0

    # A topic created again under the name starts empty, and a group that read the
    # old one gets the new messages from the start.
    admin.create(TopicConfig("orders", 2, 2))
    put(broker, "orders", 0, 1)
    assert broker.store.max_offset("orders", 0) == 1
    assert consume(broker, "g", "orders", [0, 1]) == 1


@pytest.mark.parametrize("name", [prop.SCHEDULE_TOPIC, prop.HALF_TOPIC, prop.OP_HALF_TOPIC])
def test_the_brokers_own_topics_cannot_be_changed(broker, name):
    admin = TopicAdmin(broker)
    with pytest.raises(InvalidArgument, match="belongs to the broker"):
        admin.create(TopicConfig(name, 1, 1))
    broker.ensure_system_topic(name)
    with pytest.raises(InvalidArgument, match="cannot be changed"):
        admin.update(name, TopicChange(read_queue_nums=2))
    with pytest.raises(InvalidArgument, match="cannot be deleted"):
        admin.delete(name)
    assert admin.get(name).name == name
