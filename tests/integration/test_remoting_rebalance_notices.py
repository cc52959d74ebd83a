"""Who a real broker tells to rebalance (NOTIFY_CONSUMER_IDS_CHANGED) as a group changes.

A 4.x push consumer rebalances when it starts, every 20 s after, and whenever the broker
tells it to. Its start sends a heartbeat and then rebalances, but its periodic heartbeat
can hold the heartbeat lock at that moment: the rebalance then asks for the group's
members before any heartbeat of the client arrived, is answered "no consumer", and the
client would read nothing for 20 s unless told to rebalance once its heartbeat lands.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess
from tests.support.remoting_client import Remoting

from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.remoting.codes import RequestCode, ResponseCode

TOPIC = "parcels"
broker = module_broker("remoting-rebalance-notices", topics=[TopicConfig(TOPIC, 4, 4)])


@pytest.fixture
def connect(broker: BrokerProcess) -> Iterator:
    opened: list[Remoting] = []

    def open_one() -> Remoting:
        opened.append(Remoting(broker.remoting_endpoint))
        return opened[-1]

    yield open_one
    for remoting in opened:
        remoting.close()


def _heartbeat(client: Remoting, client_id: str, group: str) -> None:
    body = {
        "clientID": client_id,
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}],
            }
        ],
    }
    answer = client.call(RequestCode.HEART_BEAT, json.dumps(body).encode())
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def _members(client: Remoting, group: str) -> tuple[int, list[str]]:
    answer = client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup=group)
    ids = json.loads(answer.body)["consumerIdList"] if answer.code == 0 else []
    return answer.code, ids


def _groups_told(client: Remoting) -> list[str]:
    """The groups named in the rebalance notices this client got so far."""
    told = client.told(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED)
    assert all(notice.is_oneway for notice in told)
    return [notice.ext_fields["consumerGroup"] for notice in told]


def test_a_consumer_that_asked_before_its_heartbeat_is_told_to_rebalance(connect):
    client = connect()
    # Its rebalance came first: no member yet, as RocketMQ's broker answers it.
    code, _ = _members(client, "early-askers")
    assert code == ResponseCode.SYSTEM_ERROR

    _heartbeat(client, "10.0.0.1@early", "early-askers")
    # The notice is written before the heartbeat's answer, so it is here already.
    assert _groups_told(client) == ["early-askers"]
    assert _members(client, "early-askers") == (ResponseCode.SUCCESS, ["10.0.0.1@early"])

    # Its periodic heartbeats change nothing: nobody is told again.
    _heartbeat(client, "10.0.0.1@early", "early-askers")
    assert _groups_told(client) == []


def test_every_member_is_told_when_one_joins_and_the_rest_when_one_leaves(connect):
    first, second = connect(), connect()
    _heartbeat(first, "10.0.0.2@a", "sharers")
    assert _groups_told(first) == ["sharers"]

    _heartbeat(second, "10.0.0.3@b", "sharers")
    assert _groups_told(second) == ["sharers"]
    assert first.next_told(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED).ext_fields == {
        "consumerGroup": "sharers"
    }

    second.close()
    assert first.next_told(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED).ext_fields == {
        "consumerGroup": "sharers"
    }
    assert _members(first, "sharers") == (ResponseCode.SUCCESS, ["10.0.0.2@a"])
