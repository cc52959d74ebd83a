"""Subscription-group settings over the remoting port, frame by frame, on a real broker.

``updateSubGroup``'s request stores a group's settings; they come back from the group
queries, survive a restart, and change what the group may do: pull at all, pull as a
broadcasting consumer, and how many times a failed message comes back.
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.integration.test_remoting_port import Remoting
from tests.support.broker_process import create_topics, data_dir_of, running_broker
from tests.support.waiting import wait_for

from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.remoting.frames import RemotingCommand

TOPIC = "payroll"


def _update(client: Remoting, group: str, **settings: object) -> RemotingCommand:
    return client.call(200, json.dumps({"groupName": group, **settings}).encode())


def _config(client: Remoting, group: str) -> dict:
    answer = client.call(352, group=group)
    assert answer.code == 0, answer.remark
    return json.loads(answer.body)


def _pull(client: Remoting, group: str) -> RemotingCommand:
    return client.call(
        11, consumerGroup=group, topic=TOPIC, queueId=0, queueOffset=0, maxMsgNums=8,
        sysFlag=0x4, commitOffset=0, suspendTimeoutMillis=0, subscription="*",
        expressionType="TAG",
    )  # fmt: skip


def _send(client: Remoting, unique: str) -> RemotingCommand:
    properties = f"UNIQ_KEY\x01{unique}\x02TAGS\x01T\x02WAIT\x01true\x02"
    return client.call(
        310, b"body-" + unique.encode(), a="p", b=TOPIC, c="TBW102", d=4, e=0, f=0, g=0, h=0,
        i=properties,
    )  # fmt: skip


def _max_offset(client: Remoting, topic: str) -> int:
    answer = client.call(30, topic=topic, queueId=0)
    return int(answer.ext_fields["offset"]) if answer.code == 0 else -1


def _grpc_receive_status(endpoint: str, group: str) -> pb.Status:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=1,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=1),
    )
    with grpc.insecure_channel(endpoint) as channel:
        frames = list(MessagingServiceStub(channel).ReceiveMessage(request, timeout=10))
    return [f.status for f in frames if f.HasField("status")][-1]


def _heartbeat(client: Remoting, group: str, model: str) -> RemotingCommand:
    body = {
        "clientID": f"{group}-client",
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": model,
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [
                    {"topic": TOPIC, "subString": "*", "expressionType": "TAG"}
                ],
            }
        ],
    }
    return client.call(34, json.dumps(body).encode())


def test_group_settings_are_stored_honoured_and_kept_across_a_restart(tmp_path: Path):
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 1, 1))
    exponential = {
        "type": "EXPONENTIAL",
        "exponentialRetryPolicy": {"initial": 1000, "max": 60000, "multiplier": 3},
    }
    with running_broker(tmp_path) as broker:
        client = Remoting(broker.remoting_endpoint)
        try:
            assert _send(client, "PAY-1").code == 0
            wait_for(lambda: _max_offset(client, TOPIC) == 1, "the message in its queue")
            assert _pull(client, "clerks").code == 0
            answer = _update(
                client, "clerks", consumeEnable=False, retryMaxTimes=0,
                groupRetryPolicy=exponential, consumeTimeoutMinute=30,
            )  # fmt: skip
            assert answer.code == 0, answer.remark
            stored = _config(client, "clerks")
            assert stored["consumeEnable"] is False and stored["retryMaxTimes"] == 0
            assert stored["groupRetryPolicy"] == exponential
            # What Skiff does not act on is kept as given; the rest has RocketMQ's defaults.
            assert stored["consumeTimeoutMinute"] == 30 and stored["consumeBroadcastEnable"]

            refused = _pull(client, "clerks")
            assert refused.code == 16
            assert "subscription group no permission, clerks" in refused.remark
            # The gRPC door applies the same settings.
            received = _grpc_receive_status(broker.endpoint, "clerks")
            assert received.code == pb.Code.FORBIDDEN
            assert "subscription group no permission, clerks" in received.message

            # retryMaxTimes 0: a send-back that names no maximum is a dead letter at once.
            sent = _send(client, "PAY-2")
            back = client.call(
                36, offset=int(sent.ext_fields["msgId"][-16:], 16), group="clerks", delayLevel=0
            )
            assert back.code == 0, back.remark
            wait_for(lambda: _max_offset(client, "%DLQ%clerks") == 1, "the dead letter")

            # A broadcasting group whose settings forbid broadcast may not pull.
            assert _update(client, "announcers", consumeBroadcastEnable=False).code == 0
            assert _heartbeat(client, "announcers", "BROADCASTING").code == 0
            broadcast = _pull(client, "announcers")
            assert broadcast.code == 16 and "can not consume by broadcast way" in broadcast.remark
            assert _heartbeat(client, "announcers", "CLUSTERING").code == 0
            assert _pull(client, "announcers").code == 0

            bad = _update(client, "clerks", retryMaxTimes="many")
            assert bad.code == 1 and "retryMaxTimes must be an integer" in bad.remark
            assert _config(client, "clerks")["retryMaxTimes"] == 0
        finally:
            client.close()

    with running_broker(tmp_path) as broker:
        client = Remoting(broker.remoting_endpoint)
        try:
            listed = json.loads(client.call(201).body)["subscriptionGroupTable"]
            assert listed["clerks"]["consumeEnable"] is False
            assert listed["clerks"]["groupRetryPolicy"] == exponential
            assert listed["announcers"]["consumeBroadcastEnable"] is False
            assert _pull(client, "clerks").code == 16

            assert _update(client, "clerks", consumeEnable=True).code == 0
            assert _pull(client, "clerks").code == 0
            assert _grpc_receive_status(broker.endpoint, "clerks").code == pb.Code.OK
            assert client.call(207, groupName="announcers").code == 0
            gone = client.call(352, group="announcers")
            assert gone.code == 1 and "No group in this broker" in gone.remark
        finally:
            client.close()
