"""Resetting, deleting and listing consumer groups write the broker's state files off its
event loop, like the other state-writing admin calls.

The broker starts with a large ``config/consumerOffset.json`` (RocketMQ's layout: many
groups, eight queues each), so each persist of the offsets table (built, encoded,
fsynced) takes longer than the tests' slow-callback report threshold. A reset, a delete
and the list after them each persist it; made on the event loop, they held it for
about 570 ms each and the report named them. Each call must also have done what it said.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of, running_broker

from skiff_broker.client.admin import AdminClient, ResetTo
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.metadata.topic_table import TopicConfig

TOPIC = "crowded"
QUEUES = 8
GROUPS = 30_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp_path = tmp_path_factory.mktemp("group-admin")
    data_dir = data_dir_of(tmp_path)
    create_topics(data_dir, TopicConfig(TOPIC, QUEUES, QUEUES))
    table = {f"{TOPIC}@group-{n}": {str(q): 0 for q in range(QUEUES)} for n in range(GROUPS)}
    (data_dir / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": table}))
    with running_broker(tmp_path) as process:
        yield process


def test_reset_and_delete_of_a_group_leave_the_event_loop_free(broker: BrokerProcess) -> None:
    with MessagingClient(broker.endpoint) as client:
        client.send([OutgoingMessage(TOPIC, b"one") for _ in range(QUEUES)])
    with AdminClient(broker.endpoint) as admin:
        moves = admin.reset_consumer_group("group-1", TOPIC, ResetTo.LATEST, force=True)
        assert sum(m.new_offset for m in moves) == QUEUES
        deleted = admin.delete_consumer_group("group-2", force=True)
        assert deleted.topics == (TOPIC,)
        remaining = {g.group for g in admin.list_consumer_groups(TOPIC)}
    assert "group-2" not in remaining and "group-1" in remaining
    broker.assert_loop_never_held()
