"""Pop consumption over the remoting port (POP_MESSAGE, ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME), frame by frame as the 5.x remoting client sends them,
on the same in-flight state as the gRPC door's receive and ack.

Receipts are built as the 5.x client builds them from the pop's header (RocketMQ's
ExtraInfoUtil form), so what the broker is asked is what that client would ask.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.integration.test_remoting_port import Remoting
from tests.official_clients import built_or_skipped, remoting_pop_java_client, run_client
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess
from tests.support.waiting import wait_for

from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.remoting.frames import RemotingCommand, encode
from skiff_broker.wire.record_codec import StoredMessage, decode_record

TOPIC = "parcels"
GROUP = "couriers"
INVISIBLE_MS = 20_000
broker = module_broker(
    "remoting-pop",
    topics=[TopicConfig(TOPIC, 1, 1), TopicConfig("letters", 2, 2), TopicConfig("bulletins", 2, 2)],
)


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[Remoting]:
    remoting = Remoting(broker.remoting_endpoint)
    yield remoting
    remoting.close()


def _send(client: Remoting, unique: str) -> None:
    properties = f"UNIQ_KEY\x01{unique}\x02TAGS\x01T\x02WAIT\x01true\x02"
    answer = client.call(
        310, unique.encode(), a="p", b=TOPIC, c="TBW102", d=4, e=0, f=0, g=0, h=0, i=properties
    )
    assert answer.code == 0, answer.remark


def _pop(client: Remoting, wanted: int = 32, poll_ms: int = 0) -> RemotingCommand:
    return client.call(
        200050, consumerGroup=GROUP, topic=TOPIC, queueId=-1, maxMsgNums=wanted,
        invisibleTime=INVISIBLE_MS, pollTime=poll_ms, bornTime=0, initMode=0,
        expType="TAG", exp="*", order="false",
    )  # fmt: skip


def _records(body: bytes) -> list[StoredMessage]:
    found, at = [], 0
    while at < len(body):
        (size,) = struct.unpack_from(">i", body, at)
        found.append(decode_record(body[at : at + size], check_crc=False))
        at += size
    return found


def _receipt(popped: RemotingCommand, message: StoredMessage) -> str:
    """The POP_CK the 5.x client builds for a popped message (no startOffsetInfo)."""
    header = popped.ext_fields
    return (
        f"{message.queue_offset} {header['popTime']} {header['invisibleTime']} "
        f"{header['reviveQid']} 0 broker-a {message.queue_id} {message.queue_offset}"
    )


def _settle(client: Remoting, code: int, receipt: str, message: StoredMessage, **extra):
    return client.call(
        code, consumerGroup=GROUP, topic=TOPIC, queueId=message.queue_id, extraInfo=receipt,
        offset=message.queue_offset, **extra,
    )  # fmt: skip


def _grpc_receive(endpoint: str) -> list[pb.Message]:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=32,
        invisible_duration=Duration(seconds=INVISIBLE_MS // 1000),
        long_polling_timeout=Duration(seconds=1),
    )
    with grpc.insecure_channel(endpoint) as channel:
        frames = list(MessagingServiceStub(channel).ReceiveMessage(request, timeout=10))
    return [f.message for f in frames if f.HasField("message")]


def test_a_popped_message_is_not_received_over_grpc_until_it_is_due_again(broker, client):
    _send(client, "PARCEL-1")
    _send(client, "PARCEL-2")
    wait_for(
        lambda: client.call(30, topic=TOPIC, queueId=0).ext_fields.get("offset") == "2",
        "both messages in their queue",
    )
    popped = _pop(client, poll_ms=1000)
    assert popped.code == 0, popped.remark
    first = _records(popped.body)
    assert [m.properties["UNIQ_KEY"] for m in first] == ["PARCEL-1", "PARCEL-2"]
    assert all(m.reconsume_times == 0 for m in first)
    assert int(popped.ext_fields["invisibleTime"]) == INVISIBLE_MS
    # In flight for the group: neither door hands them out again.
    assert _grpc_receive(broker.endpoint) == []
    assert _pop(client).code == 19

    one, two = first
    assert _settle(client, 200051, _receipt(popped, one), one).code == 0
    # Acked is acked: a second ack of the receipt is refused.
    again = _settle(client, 200051, _receipt(popped, one), one)
    assert again.code == 208 and again.remark

    # A change to 0 is a quick retry; the gRPC door then has the message, attempt 2.
    changed = _settle(client, 200053, _receipt(popped, two), two, invisibleTime=0)
    assert changed.code == 0, changed.remark
    received = _grpc_receive(broker.endpoint)
    assert [m.system_properties.message_id for m in received] == ["PARCEL-2"]
    assert received[0].system_properties.delivery_attempt == 2
    # ... and it is hidden from the remoting door while gRPC holds it.
    assert _pop(client).code == 19
    # The stale remoting receipt no longer settles it.
    stale = _settle(client, 200051, _receipt(popped, two), two)
    assert stale.code == 208

    # Retried over gRPC, it comes back to a remoting pop counting its attempts so far.
    with grpc.insecure_channel(broker.endpoint) as channel:
        nack = MessagingServiceStub(channel).ChangeInvisibleDuration(
            spb.ChangeInvisibleDurationRequest(
                group=pb.Resource(name=GROUP),
                topic=pb.Resource(name=TOPIC),
                receipt_handle=received[0].system_properties.receipt_handle,
                invisible_duration=Duration(seconds=0),
                message_id="PARCEL-2",
            ),
            timeout=10,
        )
    assert nack.status.code == pb.Code.OK, nack.status.message
    third = _pop(client, poll_ms=1000)
    assert third.code == 0, third.remark
    [retried] = _records(third.body)
    assert retried.properties["UNIQ_KEY"] == "PARCEL-2" and retried.reconsume_times == 2
    assert _settle(client, 200051, _receipt(third, retried), retried).code == 0
    assert _grpc_receive(broker.endpoint) == []


def test_pop_requests_that_make_no_sense_are_answered(client):
    no_topic = client.call(
        200050, consumerGroup=GROUP, topic="no-such-topic", queueId=-1, maxMsgNums=1,
        invisibleTime=INVISIBLE_MS, pollTime=0,
    )  # fmt: skip
    assert no_topic.code == 17
    too_short = client.call(
        200050, consumerGroup=GROUP, topic=TOPIC, queueId=-1, maxMsgNums=1,
        invisibleTime=1, pollTime=0,
    )  # fmt: skip
    assert too_short.code == 1 and "invisibleTime 1 ms is out of range" in too_short.remark
    bad_queue = client.call(
        200050, consumerGroup=GROUP, topic=TOPIC, queueId=7, maxMsgNums=1,
        invisibleTime=INVISIBLE_MS, pollTime=0,
    )  # fmt: skip
    assert bad_queue.code == 1 and "queueId 7 is illegal" in bad_queue.remark
    garbled = client.call(
        200051, consumerGroup=GROUP, topic=TOPIC, queueId=0, extraInfo="nonsense", offset=0
    )
    assert garbled.code == 1 and "not a pop receipt" in garbled.remark


def test_the_5x_remoting_clients_own_pop_ack_and_change_calls_work(broker, tmp_path):
    """rocketmq-client 5.x, unchanged: popMessageAsync, changeInvisibleTimeAsync and
    ackMessageAsync with the receipts the client builds itself."""
    program = built_or_skipped(remoting_pop_java_client)
    command = program.command(
        "calls", tmp_path, namesrv=broker.remoting_endpoint, topic="letters", group="postmen",
        count=3,
    )  # fmt: skip
    outcome = run_client(command, tmp_path)
    summary = outcome.summary
    assert summary["errors"] == [], outcome.stderr[-2000:]
    assert summary["sent"] == 3 and len(set(summary["popped"])) == 3
    # Put back at once, it came again counting its first attempt.
    assert summary["again"] == summary["popped"][0]
    assert summary["againReconsumeTimes"] == 1
    assert summary["acked"] == 3
    # Acked over remoting is acked for the gRPC door too.
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="postmen"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="letters"), id=0),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=32,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=1),
    )
    with grpc.insecure_channel(broker.endpoint) as channel:
        frames = list(MessagingServiceStub(channel).ReceiveMessage(request, timeout=10))
    assert [f for f in frames if f.HasField("message")] == []


def test_a_batch_ack_settles_the_offsets_its_bit_set_names(client):
    before = int(client.call(30, topic=TOPIC, queueId=0).ext_fields["offset"])
    for number in range(3):
        _send(client, f"BATCH-{number}")
    wait_for(
        lambda: client.call(30, topic=TOPIC, queueId=0).ext_fields["offset"] == str(before + 3),
        "the batch's messages in their queue",
    )
    popped = _pop(client, poll_ms=1000)
    assert popped.code == 0, popped.remark
    held = _records(popped.body)
    assert [m.properties["UNIQ_KEY"] for m in held] == ["BATCH-0", "BATCH-1", "BATCH-2"]
    start = held[0].queue_offset
    # java.util.BitSet's bytes: bits 0 and 2, the first and the third message.
    ack = {
        "c": GROUP, "t": TOPIC, "r": "0", "so": start, "q": 0, "rq": 0,
        "pt": int(popped.ext_fields["popTime"]), "it": INVISIBLE_MS,
        "b": base64.b64encode(bytes([0b101])).decode(),
    }  # fmt: skip
    body = json.dumps({"brokerName": "broker-a", "acks": [ack]}).encode()
    assert client.call(200151, body).code == 0
    # The middle one is still in flight; the others are settled for good.
    assert _settle(client, 200051, _receipt(popped, held[0]), held[0]).code == 208
    assert _settle(client, 200051, _receipt(popped, held[2]), held[2]).code == 208
    assert _settle(client, 200051, _receipt(popped, held[1]), held[1]).code == 0
    garbled = client.call(200151, b'{"acks": [{"c": "g"}]}')
    assert garbled.code == 1 and "BatchAckMessageRequestBody" in garbled.remark


def _notification(client: Remoting, group: str, poll_ms: int) -> RemotingCommand:
    return client.call(
        200054, consumerGroup=group, topic=TOPIC, queueId=-1, pollTime=poll_ms, bornTime=0
    )


def test_a_notification_says_whether_a_pop_would_find_something(broker, client):
    group = "notified"
    _send(client, "NOTIFY-0")
    wait_for(lambda: _notification(client, group, 0).ext_fields["hasMsg"] == "true", "a message")
    stored = int(client.call(30, topic=TOPIC, queueId=0).ext_fields["offset"])
    # A new group starts at the oldest stored message: there is something to pop.
    assert _notification(client, group, 0).ext_fields["hasMsg"] == "true"
    popped = client.call(
        200050, consumerGroup=group, topic=TOPIC, queueId=-1, maxMsgNums=32,
        invisibleTime=INVISIBLE_MS, pollTime=0,
    )  # fmt: skip
    assert popped.code == 0 and len(_records(popped.body)) == stored
    # Everything in flight: nothing, after waiting its poll time.
    quiet = _notification(client, group, 200)
    assert quiet.code == 0 and quiet.ext_fields["hasMsg"] == "false"

    # A waiting notification is counted, and ends with a message sent meanwhile.
    waiter = Remoting(broker.remoting_endpoint)
    try:
        opaque = 900_001  # answered after the wait; nothing else is asked on this connection
        fields = {"consumerGroup": group, "topic": TOPIC, "queueId": "-1", "pollTime": "20000"}
        waiter.sock.sendall(encode(RemotingCommand(code=200054, opaque=opaque, ext_fields=fields)))
        wait_for(
            lambda: (
                client.call(200055, consumerGroup=group, topic=TOPIC, queueId=-1).ext_fields[
                    "pollingNum"
                ]
                == "1"
            ),
            "the notification waiting",
        )
        _send(client, "NOTIFY-1")
        assert waiter.answer_to(opaque).ext_fields["hasMsg"] == "true"
    finally:
        waiter.close()
    info = client.call(200055, consumerGroup=group, topic=TOPIC, queueId=-1)
    assert info.code == 0 and info.ext_fields["pollingNum"] == "0"


def test_a_5x_push_consumer_the_broker_assigns_queues_pops_them_when_its_mode_is_pop(
    broker, client, tmp_path
):
    """setClientRebalance(false): the consumer asks the broker for its queues
    (QUERY_ASSIGNMENT); mqadmin setConsumeMode's request set the group's mode to POP."""
    program = built_or_skipped(remoting_pop_java_client)
    mode = {"topic": "bulletins", "consumerGroup": "readers-pop", "mode": "POP"}
    assert client.call(401, json.dumps(mode).encode()).code == 0
    bad = {"topic": "bulletins", "consumerGroup": "readers-pop", "mode": "PUSH"}
    refused = client.call(401, json.dumps(bad).encode())
    assert refused.code == 1 and "mode must be PULL or POP" in refused.remark
    command = program.command(
        "push", tmp_path, namesrv=broker.remoting_endpoint, topic="bulletins",
        group="readers-pop", count=4,
    )  # fmt: skip
    outcome = run_client(command, tmp_path)
    summary = outcome.summary
    assert summary["errors"] == [], outcome.stderr[-2000:]
    assert summary["sent"] == 4 and len(summary["received"]) == 4
    # Popped, not pulled: each message came with its pop receipt.
    assert summary["withReceipt"] >= 4
    # And acked: nothing of the group's is left in flight or unread.
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="readers-pop"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="bulletins"), id=0),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=32,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=1),
    )
    with grpc.insecure_channel(broker.endpoint) as channel:
        frames = list(MessagingServiceStub(channel).ReceiveMessage(request, timeout=10))
    assert [f for f in frames if f.HasField("message")] == []


def test_pull_assignments_split_the_queues_among_the_members_online(broker, client):
    other = Remoting(broker.remoting_endpoint)
    try:
        for remoting, client_id in ((client, "member-a"), (other, "member-b")):
            heartbeat = {
                "clientID": client_id,
                "consumerDataSet": [
                    {
                        "groupName": "splitters",
                        "messageModel": "CLUSTERING",
                        "subscriptionDataSet": [{"topic": "letters", "subString": "*"}],
                    }
                ],
            }
            assert remoting.call(34, json.dumps(heartbeat).encode()).code == 0

        def assigned(client_id: str, strategy: str = "AVG") -> list | None:
            body = {
                "topic": "letters", "consumerGroup": "splitters", "clientId": client_id,
                "strategyName": strategy, "messageModel": "CLUSTERING",
            }  # fmt: skip
            answer = client.call(400, json.dumps(body).encode())
            assert answer.code == 0, answer.remark
            found = json.loads(answer.body)["messageQueueAssignments"]
            if found is None:
                return None
            assert {a["mode"] for a in found} <= {"PULL"}
            return sorted(a["messageQueue"]["queueId"] for a in found)

        assert (assigned("member-a"), assigned("member-b")) == ([0], [1])
        # Not a member (no heartbeat), or a strategy the broker does not know: no answer.
        assert assigned("stranger") is None
        assert assigned("member-a", "CONSISTENT_HASH") is None
    finally:
        other.close()
