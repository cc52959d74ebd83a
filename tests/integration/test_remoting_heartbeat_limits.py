"""What one remoting connection's heartbeats may register, on a real broker.

A heartbeat past a limit (groups, subscriptions, an expression's length) is refused
whole with the limit named; nothing of it is recorded, a client's repeated heartbeats
never add up, and another connection has limits of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from tests.integration.test_remoting_port import Remoting
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess

from skiff_broker.remoting.frames import RemotingCommand
from skiff_broker.remoting.heartbeat_limits import (
    MAX_EXPRESSION_CHARS,
    MAX_GROUPS_PER_CONNECTION,
    MAX_SUBSCRIPTIONS_PER_CONNECTION,
)

broker = module_broker("remoting-heartbeat-limits")


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[Remoting]:
    remoting = Remoting(broker.remoting_endpoint)
    yield remoting
    remoting.close()


def _consumer(group: str, topics: list[str], expression: str = "*") -> dict:
    return {
        "groupName": group,
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "subscriptionDataSet": [
            {"topic": t, "subString": expression, "expressionType": "TAG"} for t in topics
        ],
    }


def _heartbeat(
    client: Remoting,
    client_id: str,
    consumers: list[dict],
    producers: tuple[str, ...] | list[str] = (),
) -> RemotingCommand:
    body = {
        "clientID": client_id,
        "consumerDataSet": consumers,
        "producerDataSet": [{"groupName": g} for g in producers],
    }
    return client.call(34, json.dumps(body).encode())


def _members(client: Remoting, group: str) -> int:
    answer = client.call(38, consumerGroup=group)
    return len(json.loads(answer.body)["consumerIdList"]) if answer.code == 0 else 0


def test_a_heartbeat_past_the_connections_group_limit_is_refused_whole(broker, client):
    many = [_consumer(f"g{i}", ["orders"]) for i in range(MAX_GROUPS_PER_CONNECTION + 1)]
    refused = _heartbeat(client, "c1", many)
    assert refused.code == 1
    assert f"the limit is {MAX_GROUPS_PER_CONNECTION}" in refused.remark
    assert _members(client, "g0") == 0

    # Up to the limit is taken, and the same client's next heartbeat replaces it.
    full = many[:MAX_GROUPS_PER_CONNECTION]
    assert _heartbeat(client, "c1", full).code == 0
    assert _heartbeat(client, "c1", full).code == 0
    assert _members(client, "g0") == 1
    # A new client ID on the same connection adds: past the limit.
    other_id = _heartbeat(client, "c2", [_consumer("late", ["orders"])])
    assert other_id.code == 1 and "consumer groups on one connection" in other_id.remark
    assert _members(client, "late") == 0
    # Another connection has its own limits.
    other = Remoting(broker.remoting_endpoint)
    try:
        assert _heartbeat(other, "c2", [_consumer("late", ["orders"])]).code == 0
        assert _members(other, "late") == 1
    finally:
        other.close()


def test_subscriptions_expressions_and_producer_groups_are_bounded_too(client):
    topics = [f"t{i}" for i in range(MAX_SUBSCRIPTIONS_PER_CONNECTION + 1)]
    subscriptions = _heartbeat(client, "c1", [_consumer("wide", topics)])
    assert subscriptions.code == 1
    assert f"subscriptions on one connection; the limit is {MAX_SUBSCRIPTIONS_PER_CONNECTION}" in (
        subscriptions.remark
    )
    long = _heartbeat(
        client, "c1", [_consumer("tags", ["orders"], "a" * (MAX_EXPRESSION_CHARS + 1))]
    )
    assert long.code == 1 and f"the limit is {MAX_EXPRESSION_CHARS}" in long.remark
    producers = [f"p{i}" for i in range(MAX_GROUPS_PER_CONNECTION + 1)]
    refused = _heartbeat(client, "c1", [_consumer("ok", ["orders"])], producers)
    assert refused.code == 1 and "producer groups on one connection" in refused.remark
    # Nothing of the refused heartbeat was recorded, and the connection serves on.
    assert _members(client, "ok") == 0
    assert _heartbeat(client, "c1", [_consumer("ok", ["orders"])], ["p0"]).code == 0
    assert _members(client, "ok") == 1
