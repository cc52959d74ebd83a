"""Send-back, queue locks and transactions on the remoting port, frame by frame.

What the 4.x client cannot be made to send: a send-back straight to the DLQ, the
properties the broker stores on it, two clients contending for one queue lock, and
malformed requests, each answered (or, oneway, logged) while the broker keeps serving.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from tests.integration.test_remoting_port import Remoting
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess
from tests.support.waiting import wait_for

from skiff_broker.metadata.topic_table import MessageType, TopicConfig
from skiff_broker.remoting.frames import ONEWAY_FLAG, RemotingCommand, encode
from skiff_broker.wire.record_codec import decode_record

TOPIC = "invoices"
FIFO_TOPIC = "invoices-in-order"
TRANSACTION_TOPIC = "invoices-transactional"
broker = module_broker(
    "remoting-delivery",
    topics=[
        TopicConfig(TOPIC, 2, 2),
        TopicConfig(FIFO_TOPIC, 1, 1, message_type=MessageType.FIFO),
        TopicConfig(TRANSACTION_TOPIC, 1, 1, message_type=MessageType.TRANSACTION),
    ],
)


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[Remoting]:
    remoting = Remoting(broker.remoting_endpoint)
    yield remoting
    remoting.close()


def _send(client: Remoting, unique: str, sys_flag: int = 0, extra: str = "") -> RemotingCommand:
    properties = f"UNIQ_KEY\x01{unique}\x02TAGS\x01T\x02WAIT\x01true\x02{extra}"
    return client.call(
        310, b"body-" + unique.encode(), a="p", b=TOPIC, c="TBW102", d=4, e=0, f=sys_flag,
        g=0, h=0, i=properties,
    )  # fmt: skip


def test_remoting_sends_are_not_checked_against_the_topics_message_type(client):
    """As Apache RocketMQ 5.3.3's broker: its remoting sends carry no message type to
    check (its proxy, like Skiff's gRPC door, checks them)."""
    plain = "UNIQ_KEY\x01TYPE-PLAIN\x02WAIT\x01true\x02"
    for topic in (FIFO_TOPIC, TRANSACTION_TOPIC):
        answer = client.call(
            310, b"plain", a="p", b=topic, c="TBW102", d=4, e=0, f=0, g=0, h=0, i=plain
        )
        assert answer.code == 0, answer.remark
        wait_for(lambda topic=topic: _max_offset(client, topic) == 1, f"the message in {topic}")
    delayed = "UNIQ_KEY\x01TYPE-DELAY\x02DELAY\x011\x02"
    answer = client.call(
        310, b"later", a="p", b=FIFO_TOPIC, c="TBW102", d=4, e=0, f=0, g=0, h=0, i=delayed
    )
    assert answer.code == 0, answer.remark
    wait_for(lambda: _max_offset(client, FIFO_TOPIC) == 2, "the delayed message after 1 s")


def _max_offset(client: Remoting, topic: str, queue: int = 0) -> int:
    answer = client.call(30, topic=topic, queueId=queue)
    return int(answer.ext_fields["offset"]) if answer.code == 0 else -1


def _physical_offset(offset_message_id: str) -> int:
    # RocketMQ's offset message ID ends with the commit-log offset, 8 bytes in hex.
    return int(offset_message_id[-16:], 16)


def test_a_message_past_its_reconsume_times_goes_to_the_dlq_with_rocketmqs_properties(client):
    sent = _send(client, "SB-DEAD")
    assert sent.code == 0
    offset_id = sent.ext_fields["msgId"]
    answer = client.call(
        36,
        offset=_physical_offset(offset_id),
        group="auditors",
        delayLevel=0,
        originMsgId="SB-DEAD",
        originTopic=TOPIC,
        maxReconsumeTimes=0,
    )
    assert answer.code == 0, answer.remark
    dlq = "%DLQ%auditors"
    wait_for(lambda: _max_offset(client, dlq) == 1, "the DLQ copy")
    pulled = client.call(
        11, consumerGroup="dlq-readers", topic=dlq, queueId=0, queueOffset=0, maxMsgNums=8,
        sysFlag=0x4, commitOffset=0, suspendTimeoutMillis=0, subscription="*",
        expressionType="TAG",
    )  # fmt: skip
    assert pulled.code == 0
    dead = decode_record(pulled.body, check_crc=False)
    assert dead.body == b"body-SB-DEAD" and dead.reconsume_times == 1
    assert dead.properties["UNIQ_KEY"] == "SB-DEAD"
    assert dead.properties["RETRY_TOPIC"] == TOPIC
    assert dead.properties["ORIGIN_MESSAGE_ID"] == offset_id
    assert "DELAY" not in dead.properties


def test_a_send_back_naming_no_message_or_a_broker_record_is_refused(client):
    missing = client.call(36, offset=10**12, group="auditors", delayLevel=0)
    assert missing.code == 1 and "look message by offset failed" in missing.remark
    bad = client.call(36, offset="x", group="auditors")
    assert bad.code == 1 and "offset" in bad.remark
    # A half message is the broker's: sending it back would deliver it uncommitted.
    half = _send(client, "SB-HALF", sys_flag=0x4, extra="TRAN_MSG\x01true\x02PGROUP\x01p\x02")
    assert half.code == 0 and half.ext_fields["transactionId"]
    refused = client.call(
        36, offset=_physical_offset(half.ext_fields["msgId"]), group="auditors", delayLevel=0
    )
    assert refused.code == 16 and "RMQ_SYS_TRANS_HALF_TOPIC" in refused.remark


def _pull(client: Remoting, topic: str) -> RemotingCommand:
    return client.call(
        11, consumerGroup="readers", topic=topic, queueId=0, queueOffset=0, maxMsgNums=8,
        sysFlag=0x4, commitOffset=0, suspendTimeoutMillis=0, subscription="*",
        expressionType="TAG",
    )  # fmt: skip


def _fallback_send(
    client: Remoting, group: str, unique: str, reconsume: int, most: int, level: int
):
    """What a 4.x consumer sends when its send-back failed: the delivered message's
    properties whole (the client-side ones included), to its group's retry topic."""
    copied = (
        f"UNIQ_KEY\x01{unique}\x02TAGS\x01T\x02RETRY_TOPIC\x01{TOPIC}\x02MIN_OFFSET\x010\x02"
        f"MAX_OFFSET\x015\x02CONSUME_START_TIME\x011700000000000\x02REAL_TOPIC\x01{TOPIC}\x02"
        f"DELAY\x01{level}\x02"
    )
    return client.call(
        310, b"body-" + unique.encode(), a="CLIENT_INNER_PRODUCER", b=f"%RETRY%{group}",
        c="TBW102", d=4, e=0, f=0, g=0, h=0, i=copied, j=reconsume, l=most,
    )  # fmt: skip


def test_a_consumers_own_retry_send_past_its_reconsume_times_is_a_dead_letter(client):
    answer = _fallback_send(client, "fallbacks-dead", "FB-DEAD", reconsume=3, most=2, level=5)
    assert answer.code == 0, answer.remark
    dlq = "%DLQ%fallbacks-dead"
    wait_for(lambda: _max_offset(client, dlq) == 1, "the DLQ copy")
    dead = decode_record(_pull(client, dlq).body, check_crc=False)
    assert dead.body == b"body-FB-DEAD" and dead.reconsume_times == 3
    assert dead.properties["RETRY_TOPIC"] == TOPIC
    # The broker's own properties the consumer copied are not stored again.
    for dropped in ("DELAY", "MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME", "REAL_TOPIC"):
        assert dropped not in dead.properties


def test_a_consumers_own_retry_send_waits_its_delay_level_in_the_retry_topic(client):
    answer = _fallback_send(client, "fallbacks", "FB-RETRY", reconsume=1, most=16, level=1)
    assert answer.code == 0, answer.remark
    retry = "%RETRY%fallbacks"
    assert _max_offset(client, "%DLQ%fallbacks") == -1
    wait_for(lambda: _max_offset(client, retry) == 1, "the retry copy after its 1 s level")
    again = decode_record(_pull(client, retry).body, check_crc=False)
    assert again.body == b"body-FB-RETRY" and again.reconsume_times == 1
    assert again.properties["RETRY_TOPIC"] == TOPIC and again.properties["UNIQ_KEY"] == "FB-RETRY"
    # As in RocketMQ, retries are sent one at a time.
    batch = client.call(320, b"", a="p", b=retry, c="TBW102", d=4, e=0, f=0, g=0, h=0, i="")
    assert batch.code == 13 and "batch request does not support retry group" in batch.remark
    half = client.call(
        310, b"x", a="p", b=retry, c="TBW102", d=4, e=0, f=4, g=0, h=0,
        i="UNIQ_KEY\x01FB-HALF\x02TRAN_MSG\x01true\x02",
    )  # fmt: skip
    assert half.code == 13 and "cannot be a half message" in half.remark


def test_an_orderly_groups_own_retry_send_is_a_dead_letter_at_once(client):
    body = {
        "consumerGroup": "fallbacks-orderly",
        "clientId": "c",
        "mqSet": [{"topic": TOPIC, "brokerName": "broker-a", "queueId": 0}],
    }
    assert client.call(41, json.dumps(body).encode()).code == 0
    answer = _fallback_send(client, "fallbacks-orderly", "FB-ORDER", reconsume=1, most=16, level=1)
    assert answer.code == 0, answer.remark
    wait_for(lambda: _max_offset(client, "%DLQ%fallbacks-orderly") == 1, "the DLQ copy")


def _lock(client: Remoting, code: int, client_id: str, queues: list[int], topic: str = TOPIC):
    body = {
        "consumerGroup": "sequencers",
        "clientId": client_id,
        "onlyThisBroker": False,
        "mqSet": [{"topic": topic, "brokerName": "broker-a", "queueId": q} for q in queues],
    }
    return client.call(code, json.dumps(body).encode())


def _locked(answer: RemotingCommand) -> list[int]:
    assert answer.code == 0, answer.remark
    return sorted(mq["queueId"] for mq in json.loads(answer.body)["lockOKMQSet"])


def test_a_queue_lock_is_one_clients_until_it_unlocks(broker, client):
    other = Remoting(broker.remoting_endpoint)
    try:
        assert _locked(_lock(client, 41, "a", [0, 1])) == [0, 1]
        assert _locked(_lock(other, 41, "b", [0, 1])) == []
        # The holder renews; an unlock by anyone else frees nothing.
        assert _locked(_lock(client, 41, "a", [0])) == [0]
        assert _lock(other, 42, "b", [0, 1]).code == 0
        assert _locked(_lock(other, 41, "b", [1])) == []
        assert _lock(client, 42, "a", [1]).code == 0
        assert _locked(_lock(other, 41, "b", [0, 1])) == [1]
        # Queues that are not this broker's are never locked.
        assert _locked(_lock(other, 41, "b", [0, 5], topic="no-such-topic")) == []
    finally:
        other.close()
    garbage = client.call(41, b"{not json")
    assert garbage.code == 1 and "LockBatchRequestBody" in garbage.remark
    no_client = client.call(41, json.dumps({"consumerGroup": "g", "mqSet": []}).encode())
    assert no_client.code == 1 and "clientId" in no_client.remark


def test_transactional_sends_and_ends_that_make_no_sense_lose_nothing(client):
    committed_type = _send(client, "TX-COMMIT-TYPE", sys_flag=0x8)
    assert committed_type.code == 13 and "END_TRANSACTION" in committed_type.remark
    # Oneway ends naming nothing real: logged, never answered, and the broker serves on.
    for fields in (
        {"commitOrRollback": "8", "transactionId": "nope", "msgId": "x"},
        {"commitOrRollback": "8", "commitLogOffset": "-1", "msgId": "x"},
        {"commitOrRollback": "zz"},
    ):
        client.sock.sendall(
            encode(RemotingCommand(code=37, opaque=999, flag=ONEWAY_FLAG, ext_fields=fields))
        )
    half = _send(client, "TX-LATER", sys_flag=0x4, extra="TRAN_MSG\x01true\x02PGROUP\x01p\x02")
    assert half.code == 0
    before = _max_offset(client, TOPIC)
    # Committed by its transaction ID: the message reaches its topic.
    client.sock.sendall(
        encode(
            RemotingCommand(
                code=37,
                opaque=1000,
                flag=ONEWAY_FLAG,
                ext_fields={
                    "commitOrRollback": "8",
                    "transactionId": half.ext_fields["transactionId"],
                    "msgId": "TX-LATER",
                    "producerGroup": "p",
                    "fromTransactionCheck": "false",
                },
            )
        )
    )
    wait_for(lambda: _max_offset(client, TOPIC) == before + 1, "the committed message")
    pulled = client.call(
        11, consumerGroup="tx-readers", topic=TOPIC, queueId=0, queueOffset=before,
        maxMsgNums=8, sysFlag=0x4, commitOffset=0, suspendTimeoutMillis=0, subscription="*",
        expressionType="TAG",
    )  # fmt: skip
    assert pulled.code == 0
    message = decode_record(pulled.body, check_crc=False)
    assert message.properties["UNIQ_KEY"] == "TX-LATER"


def test_an_end_naming_the_message_id_as_its_transaction_is_found_by_its_offset(client):
    """The Go client v2 answers a check so: RocketMQ's broker goes by the offset alone."""
    half = _send(client, "TX-BY-OFFSET", sys_flag=0x4, extra="TRAN_MSG\x01true\x02PGROUP\x01p\x02")
    assert half.code == 0
    before = _max_offset(client, TOPIC)
    ending = RemotingCommand(
        code=37,
        opaque=1001,
        flag=ONEWAY_FLAG,
        ext_fields={
            "commitOrRollback": "8",
            "transactionId": "TX-BY-OFFSET",
            "commitLogOffset": str(_physical_offset(half.ext_fields["msgId"])),
            "msgId": "TX-BY-OFFSET",
            "producerGroup": "p",
            "fromTransactionCheck": "true",
        },
    )
    client.sock.sendall(encode(ending))
    wait_for(lambda: _max_offset(client, TOPIC) == before + 1, "the committed message")
    pulled = client.call(
        11, consumerGroup="tx-offset-readers", topic=TOPIC, queueId=0, queueOffset=before,
        maxMsgNums=8, sysFlag=0x4, commitOffset=0, suspendTimeoutMillis=0, subscription="*",
        expressionType="TAG",
    )  # fmt: skip
    assert pulled.code == 0
    assert decode_record(pulled.body, check_crc=False).properties["UNIQ_KEY"] == "TX-BY-OFFSET"
