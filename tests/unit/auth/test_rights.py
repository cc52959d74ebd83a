"""What each RPC needs, as RocketMQ 5 asks it."""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from skiff_broker.admin.v1 import admin_pb2 as apb
from skiff_broker.auth.decision import SUPER_ONLY
from skiff_broker.auth.rights import needs_of, telemetry_needs, transaction_check_needs

MESSAGING = "/apache.rocketmq.v2.MessagingService/"


def described(needs) -> set[str]:
    return {str(need) for need in needs}


def test_receiving_needs_sub_on_topic_and_group():
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="billing"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="orders")),
    )
    assert described(needs_of(MESSAGING + "ReceiveMessage", request)) == {
        "Sub on Topic:orders",
        "Sub on Group:billing",
    }


def test_sending_needs_pub_on_every_topic_of_the_request():
    request = spb.SendMessageRequest(
        messages=[pb.Message(topic=pb.Resource(name=name)) for name in ("a", "b", "a")]
    )
    assert described(needs_of(MESSAGING + "SendMessage", request)) == {
        "Pub on Topic:a",
        "Pub on Topic:b",
    }


def test_a_route_accepts_pub_sub_or_get_and_a_producer_heartbeat_needs_nothing():
    route = spb.QueryRouteRequest(topic=pb.Resource(name="orders"))
    assert described(needs_of(MESSAGING + "QueryRoute", route)) == {
        "Get or Pub or Sub on Topic:orders"
    }
    producer = spb.HeartbeatRequest(client_type=pb.ClientType.PRODUCER)
    assert needs_of(MESSAGING + "Heartbeat", producer) == ()
    consumer = spb.HeartbeatRequest(
        client_type=pb.ClientType.SIMPLE_CONSUMER, group=pb.Resource(name="billing")
    )
    assert described(needs_of(MESSAGING + "Heartbeat", consumer)) == {"Sub on Group:billing"}


def test_user_management_promotion_and_unknown_calls_are_for_super_users():
    for method in ("ApplyUser", "ListAcls", "Promote"):
        assert needs_of(f"/skiff.admin.v1.AdminService/{method}", apb.ListUsersRequest()) == (
            SUPER_ONLY
        )
    assert needs_of("/some.Other/Call", None) == SUPER_ONLY


def test_consumer_group_tools_need_list_get_update_or_delete():
    admin = "/skiff.admin.v1.AdminService/"
    assert described(needs_of(admin + "ListConsumerGroups", apb.ListConsumerGroupsRequest())) == {
        "List on Cluster"
    }
    describe = apb.DescribeConsumerGroupRequest(group="billing")
    assert described(needs_of(admin + "DescribeConsumerGroup", describe)) == {
        "Get on Group:billing"
    }
    reset = apb.ResetConsumerGroupOffsetsRequest(group="billing", topic="orders")
    assert described(needs_of(admin + "ResetConsumerGroupOffsets", reset)) == {
        "Update on Group:billing"
    }
    delete = apb.DeleteConsumerGroupRequest(group="billing")
    assert described(needs_of(admin + "DeleteConsumerGroup", delete)) == {"Delete on Group:billing"}


def test_a_transaction_check_needs_pub_on_its_topic():
    assert described(transaction_check_needs("txpay")) == {"Pub on Topic:txpay"}


def test_telemetry_settings_that_name_no_topic_claim_nothing():
    # Allowed to anyone signed, and so given nothing: no topic, no transaction check.
    empty = spb.TelemetryCommand(
        settings=pb.Settings(client_type=pb.ClientType.PRODUCER, publishing=pb.Publishing())
    )
    assert telemetry_needs(empty) == ()
    assert telemetry_needs(spb.TelemetryCommand()) == ()
