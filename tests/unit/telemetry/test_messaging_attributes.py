"""The messaging semantic-convention attributes of SERVER spans, read from real
apache.rocketmq.v2 requests."""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from skiff_broker.frontdoor.grpc.undecodable import Undecodable
from skiff_broker.telemetry import conventions as cv
from skiff_broker.telemetry.messaging_attributes import (
    MESSAGING_SERVICE,
    method_attributes,
    request_reader,
)


def message(topic: str, message_id: str) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        system_properties=pb.SystemProperties(message_id=message_id),
        body=b"x",
    )


def read(method: str, request: object) -> dict:
    reader = request_reader(MESSAGING_SERVICE, method)
    assert reader is not None
    return {**method_attributes(MESSAGING_SERVICE, method), **reader(request)}


def test_a_single_send_names_its_message() -> None:
    request = spb.SendMessageRequest(messages=[message("orders", "m-1")])
    assert read("SendMessage", request) == {
        cv.MESSAGING_SYSTEM: "rocketmq",
        cv.MESSAGING_OPERATION_TYPE: "send",
        cv.MESSAGING_OPERATION: "send",
        cv.TOPIC: "orders",
        cv.MESSAGE_COUNT: 1,
        cv.MESSAGE_ID: "m-1",
    }


def test_a_batch_gives_its_size_and_no_message_id() -> None:
    request = spb.SendMessageRequest(messages=[message("orders", f"m-{i}") for i in range(3)])
    found = read("SendMessage", request)
    assert found[cv.MESSAGE_COUNT] == 3
    assert cv.MESSAGE_ID not in found


def test_receives_and_acks_name_the_consumer_group() -> None:
    receive = spb.ReceiveMessageRequest(
        group=pb.Resource(name="billing"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="orders"), id=-1),
    )
    assert read("ReceiveMessage", receive)[cv.CONSUMER_GROUP] == "billing"
    assert read("ReceiveMessage", receive)[cv.MESSAGING_OPERATION_TYPE] == "receive"
    ack = spb.AckMessageRequest(
        group=pb.Resource(name="billing"),
        topic=pb.Resource(name="orders"),
        entries=[spb.AckMessageEntry(message_id="m-9", receipt_handle="h")],
    )
    assert read("AckMessage", ack) == {
        cv.MESSAGING_SYSTEM: "rocketmq",
        cv.MESSAGING_OPERATION_TYPE: "settle",
        cv.MESSAGING_OPERATION: "settle",
        cv.TOPIC: "orders",
        cv.CONSUMER_GROUP: "billing",
        cv.MESSAGE_COUNT: 1,
        cv.MESSAGE_ID: "m-9",
    }


def test_a_pull_without_a_group_leaves_the_group_out() -> None:
    pull = spb.PullMessageRequest(
        message_queue=pb.MessageQueue(topic=pb.Resource(name="orders"), id=0)
    )
    assert cv.CONSUMER_GROUP not in read("PullMessage", pull)


def test_other_methods_and_services_and_unreadable_requests() -> None:
    assert method_attributes(MESSAGING_SERVICE, "QueryRoute") == {cv.MESSAGING_SYSTEM: "rocketmq"}
    assert request_reader(MESSAGING_SERVICE, "QueryRoute") is None
    assert method_attributes("skiff.admin.v1.Admin", "CreateTopic") == {}
    reader = request_reader(MESSAGING_SERVICE, "SendMessage")
    assert reader is not None
    assert reader(Undecodable("truncated")) == {}
