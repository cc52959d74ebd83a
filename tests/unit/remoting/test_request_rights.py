"""What each remoting request needs: RocketMQ 5's rules on Skiff's ACL model."""

from __future__ import annotations

import json

import pytest

from skiff_broker.auth.decision import SUPER_ONLY, need
from skiff_broker.auth.model import Action, ResourceType
from skiff_broker.remoting.frames import RemotingCommand
from skiff_broker.remoting.request_rights import needs_of
from skiff_broker.remoting.service import HeaderError

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
PUB, SUB, GET = Action.PUB, Action.SUB, Action.GET


def request(code: int, body: bytes = b"", **fields: str) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields=dict(fields), body=body)


def test_a_send_v2_needs_pub_on_the_topic_in_field_b_and_a_retry_topic_sub_on_its_group():
    assert needs_of(request(310, a="producers", b="orders")) == (need(TOPIC, "orders", PUB),)
    assert needs_of(request(310, a="CLIENT_INNER_PRODUCER", b="%RETRY%billing")) == (
        need(GROUP, "billing", SUB),
    )


def test_a_route_takes_pub_sub_or_get_and_a_retry_route_names_the_group():
    assert needs_of(request(105, topic="orders")) == (need(TOPIC, "orders", PUB, SUB, GET),)
    assert needs_of(request(105, topic="%RETRY%billing")) == (need(GROUP, "billing", SUB, GET),)


def test_a_pull_needs_sub_on_topic_and_group_and_of_a_retry_topic_the_group_only():
    pull = request(11, topic="orders", consumerGroup="billing")
    assert needs_of(pull) == (need(TOPIC, "orders", SUB), need(GROUP, "billing", SUB))
    retry = request(11, topic="%RETRY%billing", consumerGroup="billing")
    assert needs_of(retry) == (need(GROUP, "billing", SUB),)


def test_a_consumer_heartbeat_needs_sub_on_its_groups_and_topics_a_producer_one_nothing():
    body = json.dumps(
        {
            "clientID": "c1",
            "consumerDataSet": [
                {
                    "groupName": "billing",
                    "subscriptionDataSet": [{"topic": "orders"}, {"topic": "%RETRY%billing"}],
                }
            ],
            "producerDataSet": [{"groupName": "producers"}],
        }
    ).encode()
    assert needs_of(request(34, body)) == (need(GROUP, "billing", SUB), need(TOPIC, "orders", SUB))
    producer_only = json.dumps({"clientID": "p1", "producerDataSet": [{"groupName": "p"}]})
    assert needs_of(request(34, producer_only.encode())) == ()


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'{"consumerDataSet": 3}'])
def test_a_body_the_rules_cannot_read_is_a_header_error(body):
    with pytest.raises(HeaderError, match="HeartbeatData"):
        needs_of(request(34, body))


def test_admin_requests_need_the_named_resource_and_codes_without_rules_a_super_user():
    assert needs_of(request(17, topic="orders")) == (need(TOPIC, "orders", Action.CREATE),)
    assert needs_of(request(21)) == (need(CLUSTER, "", Action.LIST),)
    assert needs_of(request(208, consumerGroup="billing", topicList="a;b")) == (
        need(GROUP, "billing", GET),
        need(TOPIC, "a", GET),
        need(TOPIC, "b", GET),
    )
    for code in (25, 50, 9999):  # UPDATE_BROKER_CONFIG, PUT_KV_CONFIG, unknown
        assert needs_of(request(code)) == SUPER_ONLY


def test_the_dashboards_views_need_list_on_the_cluster_or_get_on_the_producer_group():
    # GET_SYSTEM_TOPIC_LIST_FROM_NS and _FROM_BROKER: listings, as the topic list is.
    for code in (304, 305):
        assert needs_of(request(code)) == (need(CLUSTER, "", Action.LIST),)
    # GET_PRODUCER_CONNECTION_LIST: Get on the group it names.
    assert needs_of(request(204, producerGroup="billing")) == (need(GROUP, "billing", GET),)
    # GET_BROKER_CONFIG shows the broker's settings: super users only, as the change is.
    assert needs_of(request(26)) == SUPER_ONLY


def test_handing_a_message_to_a_consumer_needs_sub_on_its_topic_and_group():
    wanted = needs_of(request(309, topic="orders", consumerGroup="billing", msgId="00"))
    assert wanted == (need(TOPIC, "orders", SUB), need(GROUP, "billing", SUB))


def test_a_batch_ack_needs_sub_on_every_topic_and_group_it_settles():
    body = json.dumps(
        {
            "brokerName": "broker-a",
            "acks": [
                {"c": "billing", "t": "orders", "so": 0, "q": 0, "pt": 1, "b": "AQ=="},
                {"consumerGroup": "audit", "topic": "%RETRY%audit", "startOffset": 0},
            ],
        }
    ).encode()
    assert needs_of(request(200151, body)) == (
        need(TOPIC, "orders", SUB),
        need(GROUP, "billing", SUB),
        need(GROUP, "audit", SUB),
    )
    with pytest.raises(HeaderError, match="BatchAckMessageRequestBody"):
        needs_of(request(200151, b"{not json"))


def test_a_queue_assignment_needs_sub_on_the_topic_and_group_and_of_a_retry_topic_the_group():
    def body(topic: str) -> bytes:
        return json.dumps({"topic": topic, "consumerGroup": "billing", "clientId": "c"}).encode()

    assert needs_of(request(400, body("orders"))) == (
        need(TOPIC, "orders", SUB),
        need(GROUP, "billing", SUB),
    )
    assert needs_of(request(400, body("%RETRY%billing"))) == (need(GROUP, "billing", SUB),)
    # Setting a group's mode is an admin's: super users only, as any request not listed.
    assert needs_of(request(401, b"{}")) == SUPER_ONLY
