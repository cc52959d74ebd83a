"""The remoting port's admin and look-up requests, frame by frame, on a real broker.

mqadmin's happy paths are in test_remoting_mqadmin.py; here are the answers a tool gets
when it asks for something wrong, and the exact bodies and offsets behind the commands.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator

import pytest
from tests.integration.test_remoting_port import Remoting
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess
from tests.support.waiting import wait_for

from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.remoting.frames import RESPONSE_FLAG, RemotingCommand, encode

TOPIC = "ledger"
broker = module_broker("remoting-admin", topics=[TopicConfig(TOPIC, 2, 2)])


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[Remoting]:
    remoting = Remoting(broker.remoting_endpoint)
    yield remoting
    remoting.close()


def _send(client: Remoting, body: bytes, key: str, queue: int = 0):
    properties = f"UNIQ_KEY\x01U-{key}\x02KEYS\x01{key}\x02TAGS\x01T\x02WAIT\x01true\x02"
    return client.call(
        310, body, a="p", b=TOPIC, c="TBW102", d=4, e=queue, f=0, g=0, h=0, i=properties
    )


def test_topics_are_created_changed_and_deleted_and_broker_topics_refused(client):
    assert client.call(17, topic="made-here", readQueueNums=3, writeQueueNums=3, perm=6).code == 0
    config = json.loads(client.call(351, topic="made-here").body)
    assert (config["readQueueNums"], config["writeQueueNums"], config["perm"]) == (3, 3, 6)
    # More write queues than read queues would strand messages: refused, unchanged.
    refused = client.call(17, topic="made-here", readQueueNums=2, writeQueueNums=4, perm=6)
    assert refused.code == 1 and refused.remark
    assert json.loads(client.call(351, topic="made-here").body)["readQueueNums"] == 3
    system = client.call(17, topic="RMQ_SYS_TRANS_HALF_TOPIC", readQueueNums=1, writeQueueNums=1)
    assert system.code == 1 and "belongs to the broker" in system.remark
    assert client.call(215, topic="SCHEDULE_TOPIC_XXXX").code == 1
    assert client.call(215, topic="made-here").code == 0
    assert client.call(351, topic="made-here").code == 17
    assert "made-here" not in json.loads(client.call(206).body)["topicList"]


def test_a_message_is_viewed_by_its_offset_and_found_by_key_and_time(client):
    sent = _send(client, b"look me up", "find-me", queue=1)
    assert sent.code == 0
    # The offset message ID: store host (the remoting address) and commit-log offset.
    offset_id = bytes.fromhex(sent.ext_fields["msgId"])
    physical = int.from_bytes(offset_id[8:], "big")
    viewed = client.call(33, offset=physical, topic=TOPIC)
    assert viewed.code == 0
    assert b"look me up" in viewed.body and b"find-me" in viewed.body
    assert int.from_bytes(viewed.body[:4], "big") == len(viewed.body)
    inside = client.call(33, offset=physical + 1, topic=TOPIC)
    assert inside.code == 1 and "no message is stored at commit-log offset" in inside.remark

    found = client.call(
        12, topic=TOPIC, key="find-me", maxNum=32, beginTimestamp=0, endTimestamp=2**62
    )
    assert found.code == 0 and found.body == viewed.body
    by_unique = client.call(
        12,
        topic=TOPIC,
        key="U-find-me",
        maxNum=32,
        beginTimestamp=0,
        endTimestamp=2**62,
        _UNIQUE_KEY_QUERY="true",
    )
    assert by_unique.code == 0 and by_unique.body == viewed.body
    missing = client.call(
        12, topic=TOPIC, key="nobody", maxNum=32, beginTimestamp=0, endTimestamp=2**62
    )
    assert missing.code == 22 and missing.body == b""

    # Only this test writes to queue 1: its message is the queue's first.
    queue_offset = int(sent.ext_fields["queueOffset"])
    assert queue_offset == 0
    assert client.call(29, topic=TOPIC, queueId=1, timestamp=0).ext_fields["offset"] == "0"
    future = client.call(29, topic=TOPIC, queueId=1, timestamp=int(time.time() * 1000) + 10**7)
    assert int(future.ext_fields["offset"]) == queue_offset + 1
    assert client.call(29, topic="no-such-topic", queueId=0, timestamp=0).code == 17


def test_groups_answers_say_what_is_missing(client):
    offline = client.call(203, consumerGroup="nobody-home")
    assert offline.code == 206 and "no 4.x client" in offline.remark
    bad = client.call(200, b"not json")
    assert bad.code == 1 and "SubscriptionGroupConfig" in bad.remark
    assert client.call(200, json.dumps({"groupName": "fine-group"}).encode()).code == 0
    bad_name = client.call(200, json.dumps({"groupName": "no spaces"}).encode())
    assert bad_name.code == 1

    # A reset to the end moves the group past every message, and consume stats say so.
    _send(client, b"one", "k1", queue=0)
    reset = client.call(222, topic=TOPIC, group="resetters", timestamp=-1, isForce="true")
    assert reset.code == 0
    stats = client.call(208, consumerGroup="resetters", topic=TOPIC)
    assert stats.code == 0
    # fastjson's map with MessageQueue keys: {{"brokerName":..,"queueId":0,..}:{...},...}
    plain = re.sub(
        rb'\{"brokerName":"broker-a","queueId":(\d+),"topic":"ledger"\}:', rb'"\1":', stats.body
    )
    table = json.loads(plain)["offsetTable"]
    assert set(table) == {"0", "1"}
    assert table["0"]["brokerOffset"] >= 1
    # When the last consumed message was stored (RocketMQ's lastTimestamp).
    assert table["0"]["lastTimestamp"] > time.time() * 1000 - 600_000
    for queue in table.values():
        assert queue["consumerOffset"] == queue["brokerOffset"]
    assert "resetters" in json.loads(client.call(300, topic=TOPIC).body)["groupList"]


def test_the_dashboards_views_answer_with_rocketmqs_bodies(client):
    # GET_ALL_TOPIC_CONFIG: every topic a client may use, none of the broker's own.
    table = json.loads(client.call(21).body)["topicConfigTable"]
    assert table[TOPIC]["readQueueNums"] == 2 and table[TOPIC]["perm"] == 6
    assert not {"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"} & set(table)
    # GET_BROKER_CONFIG: Java properties text, which RocketMQ's admin client parses.
    lines = client.call(26).body.decode().splitlines()
    settings = dict(line.split("=", 1) for line in lines)
    assert settings["brokerName"] == "broker-a" and settings["brokerId"] == "0"
    # GET_SYSTEM_TOPIC_LIST_FROM_NS: the cluster's and broker's names, and where to ask
    # the broker for its own (it has none a client could use).
    system = json.loads(client.call(304).body)
    assert system["topicList"] == ["DefaultCluster", "broker-a"]
    assert json.loads(client.call(305).body)["topicList"] == []
    # GET_PRODUCER_CONNECTION_LIST of a group no producer of which is online: RocketMQ's
    # code and a sentence saying so, at once.
    absent = client.call(204, producerGroup="nobody-sends")
    assert absent.code == 1 and "not exist" in absent.remark and "nobody-sends" in absent.remark


def test_a_producers_heartbeat_makes_its_connection_listed_until_it_closes(broker):
    producer = Remoting(broker.remoting_endpoint)
    heartbeat = {"clientID": "10.0.0.9@ledger", "producerDataSet": [{"groupName": "ledgers"}]}
    assert producer.call(34, json.dumps(heartbeat).encode()).code == 0
    asker = Remoting(broker.remoting_endpoint)
    try:
        listed = json.loads(asker.call(204, producerGroup="ledgers").body)["connectionSet"]
        assert [c["clientId"] for c in listed] == ["10.0.0.9@ledger"]
        producer.close()
        wait_for(
            lambda: asker.call(204, producerGroup="ledgers").code == 1,
            "the closed producer's connection to leave the list",
        )
    finally:
        asker.close()


# What the RocketMQ Dashboard can ask that Skiff does not serve: broker config changes,
# write-permission switches, KV config, offset cloning, broker stats, and the ACL 2.0
# user and ACL pages (AUTH_CREATE_USER 3001 to AUTH_LIST_ACL 3010).
DASHBOARD_UNSERVED = (25, 205, 219, 314, 315, 317, 327, *range(3001, 3011))


def test_the_dashboards_requests_skiff_does_not_serve_are_answered_not_supported(client):
    for code in DASHBOARD_UNSERVED:
        answer = client.call(code)
        assert answer.code == 3, code  # REQUEST_CODE_NOT_SUPPORTED
        assert answer.remark == f"request type {code} not supported by Skiff"


def test_a_message_for_a_consumer_directly_is_refused_with_the_reason_before_asking(client):
    sent = _send(client, b"direct", "kd")
    assert sent.code == 0
    fields = {"consumerGroup": "auditors", "clientId": "127.0.0.1@gone", "topic": TOPIC}
    # CONSUME_MESSAGE_DIRECTLY names the message by its offset message ID.
    bad = client.call(309, msgId="U-kd", **fields)
    assert bad.code == 1 and "not an offset message ID" in bad.remark
    absent = client.call(309, msgId=sent.ext_fields["msgId"], **fields)
    assert absent.code == 1
    assert absent.remark.startswith("The Consumer <auditors> <127.0.0.1@gone> not online")


def _consumer_heartbeat(endpoint: str, group: str, client_id: str) -> Remoting:
    consumer = Remoting(endpoint)
    heartbeat = {
        "clientID": client_id,
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}],
            }
        ],
    }
    assert consumer.call(34, json.dumps(heartbeat).encode()).code == 0
    return consumer


def test_a_consumers_running_info_is_its_own_answer_and_its_silence_is_reported(broker):
    consumer = _consumer_heartbeat(broker.remoting_endpoint, "watchers", "10.0.0.7@watch")
    asker = Remoting(broker.remoting_endpoint)
    try:
        answers: list[RemotingCommand] = []
        fields = {"consumerGroup": "watchers", "clientId": "10.0.0.7@watch"}
        asking = threading.Thread(target=lambda: answers.append(asker.call(307, **fields)))
        asking.start()
        forwarded = consumer.next_told(307)
        assert forwarded.ext_fields["clientId"] == "10.0.0.7@watch"
        reply = RemotingCommand(code=0, opaque=forwarded.opaque, flag=RESPONSE_FLAG)
        reply.body = b'{"properties":{"consumerGroup":"watchers"}}'
        consumer.sock.sendall(encode(reply))
        asking.join(30)
        assert [(a.code, a.body) for a in answers] == [(0, reply.body)]

        # A client that never answers: the asker is told so, not left waiting.
        silent = asker.call(307, **fields)
        assert silent.code == 1
        assert "10.0.0.7@watch of watchers did not answer within 4 s" in silent.remark
        assert consumer.next_told(307).ext_fields["consumerGroup"] == "watchers"
    finally:
        consumer.close()
        asker.close()


def _tps(client: Remoting) -> tuple[float, float, float, float]:
    """(topic put, group consume, broker put over 10 s, broker consumed over 10 s)."""
    topic = client.call(202, topic=TOPIC)
    group = client.call(208, consumerGroup="tps-readers", topic=TOPIC)
    table = json.loads(client.call(28).body)["table"]
    return (
        float(re.search(rb'"topicPutTps":([0-9.]+)', topic.body).group(1)),
        float(re.search(rb'"consumeTps":([0-9.]+)', group.body).group(1)),
        float(table["putTps"].split()[0]),
        float(table["getTransferedTps"].split()[0]),
    )


def test_put_and_consume_rates_come_from_what_was_stored_and_consumed(client):
    sent = 40
    for number in range(sent):
        assert _send(client, b"counted", f"tps-{number}", queue=1).code == 0
    committed = iter(range(1, sent + 1))

    def consumed_more() -> bool:
        # The group consumes on as the figures are asked (its first commit is no
        # traffic yet: a rate needs it in two samples).
        answer = client.call(
            15, consumerGroup="tps-readers", topic=TOPIC, queueId=1,
            commitOffset=next(committed, sent),
        )  # fmt: skip
        assert answer.code == 0, answer.remark
        return all(rate > 0 for rate in _tps(client))

    wait_for(consumed_more, "every rate above 0")
    # brokerStatus shows three windows, as RocketMQ's: 10 s, 1 min, 10 min.
    table = json.loads(client.call(28).body)["table"]
    assert len(table["putTps"].split()) == 3 and len(table["getTransferedTps"].split()) == 3
