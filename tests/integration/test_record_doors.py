"""The record doors against real broker processes: what they refuse, what survives a crash.

- Append refuses the issue's record (properties not ending in ``\\x02``) with a
  sentence naming it, and a SIGKILL then a restart keeps every message the
  broker acknowledged, before and after the refusal (SYNC_FLUSH).
- SendMessage refuses a body flagged GZIP that is not gzip, and a tag holding
  a property separator, each alone in its batch.
- A stored body flagged compressed that does not inflate (written around the
  doors, straight into the data directory) never stops a PullConsumer: it gets
  the good messages after it, and a WARNING names the one skipped.
"""

from __future__ import annotations

import gzip
import logging
import uuid
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.support.broker_process import (
    SMALL_FILES_ENV,
    create_topics,
    data_dir_of,
    running_broker,
    start_broker,
)
from tests.support.queue_ends import wait_until_dispatched

from skiff_broker.client.pull_consumer import PullConsumer
from skiff_broker.client.records import encode_record, topic_field
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.records.v1 import records_pb2 as rpb
from skiff_broker.records.v1 import records_pb2_grpc
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore
from skiff_broker.wire.properties import encode_properties
from skiff_broker.wire.record_layout import COMPRESSED, SYSFLAG_OFFSET

TOPIC = "doors"
RPC_TIMEOUT_S = 10


def record(message_id: str, body: bytes, properties: bytes | None = None) -> bytes:
    raw = encode_properties({"UNIQ_KEY": message_id}) if properties is None else properties
    return encode_record(topic_field(TOPIC), body, raw, 1_700_000_000_000)


def append(stub: records_pb2_grpc.RecordServiceStub, records: list[bytes]) -> list[str]:
    """Append ``records``; the IDs of those the broker acknowledged."""
    answer = stub.Append(rpb.AppendRequest(topic=TOPIC, records=b"".join(records)), timeout=10)
    assert answer.status == rpb.AppendResponse.STORED
    assert answer.record_count == len(records)
    return [r[-33:-1].decode() for r in records]


def all_messages(endpoint: str) -> dict[str, bytes]:
    """Every message of TOPIC, by ID, once all acknowledged ones are readable."""
    wait_until_dispatched(endpoint)
    with PullConsumer(endpoint) as consumer:
        got = {}
        for queue in consumer.queue_ranges(TOPIC):
            for message in consumer.read_range(
                TOPIC, queue.queue_id, queue.min_offset, queue.max_offset
            ):
                got[message.message_id] = message.body
        return got


def test_unterminated_properties_are_refused_and_a_crash_keeps_every_acknowledged_message(
    tmp_path: Path,
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 2, 2))
    sent: dict[str, bytes] = {}
    broker = start_broker(tmp_path, "--flush-type", "SYNC_FLUSH")
    try:
        with grpc.insecure_channel(broker.endpoint) as channel:
            stub = records_pb2_grpc.RecordServiceStub(channel)
            for batch in range(20):
                records = []
                for i in range(50):
                    message_id = uuid.uuid4().hex.upper()
                    body = f"before {batch}/{i}".encode() * 3
                    sent[message_id] = body
                    records.append(record(message_id, body))
                append(stub, records)

            good_id = uuid.uuid4().hex.upper()
            unterminated = record("X", b"bad", b"UNIQ_KEY\x01" + uuid.uuid4().hex.encode())
            with pytest.raises(grpc.RpcError) as refused:
                stub.Append(
                    rpb.AppendRequest(topic=TOPIC, records=record(good_id, b"good") + unterminated),
                    timeout=RPC_TIMEOUT_S,
                )
            error = refused.value
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "nothing was stored" in error.details()
            assert "record 1 " in error.details() and "\\x02" in error.details()

            flagged = bytearray(record(uuid.uuid4().hex.upper(), b"flagged, not gzip"))
            flagged[SYSFLAG_OFFSET : SYSFLAG_OFFSET + 4] = COMPRESSED.to_bytes(4, "big")
            with pytest.raises(grpc.RpcError) as refused:
                stub.Append(
                    rpb.AppendRequest(topic=TOPIC, records=bytes(flagged)), timeout=RPC_TIMEOUT_S
                )
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "not zlib or gzip" in refused.value.details()
            assert "compressed bit" in refused.value.details()

            for batch in range(20):
                records = []
                for i in range(50):
                    message_id = uuid.uuid4().hex.upper()
                    body = f"after {batch}/{i}".encode() * 3
                    sent[message_id] = body
                    records.append(record(message_id, body))
                append(stub, records)
    finally:
        broker.kill()

    with running_broker(tmp_path) as restarted:
        got = all_messages(restarted.endpoint)
        log = restarted.log()
    assert got == sent, f"{len(set(sent) - set(got))} acknowledged messages lost"
    assert good_id not in got, "a refused append must store nothing"
    assert "commit log cut" not in log


def send_one(stub: MessagingServiceStub, message: pb.Message) -> pb.Status:
    answer = stub.SendMessage(spb.SendMessageRequest(messages=[message]), timeout=RPC_TIMEOUT_S)
    assert len(answer.entries) == 1
    return answer.entries[0].status


def v2_message(body: bytes, encoding: int = pb.Encoding.IDENTITY, tag: str = "") -> pb.Message:
    system = pb.SystemProperties(
        message_id=uuid.uuid4().hex.upper(),
        body_encoding=encoding,
        message_type=pb.MessageType.NORMAL,
        born_timestamp=Timestamp(seconds=1_700_000_000),
    )
    if tag:
        system.tag = tag
    return pb.Message(topic=pb.Resource(name=TOPIC), body=body, system_properties=system)


def test_send_message_refuses_bodies_and_properties_a_record_cannot_hold(tmp_path: Path) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 1, 1))
    with running_broker(tmp_path) as broker, grpc.insecure_channel(broker.endpoint) as channel:
        stub = MessagingServiceStub(channel)
        not_gzip = send_one(stub, v2_message(b"plain text, flagged gzip", pb.Encoding.GZIP))
        assert not_gzip.code == pb.Code.MESSAGE_CORRUPTED
        assert "not zlib or gzip" in not_gzip.message and "uncompressed" in not_gzip.message
        bomb = gzip.compress(bytes(5 * 1024 * 1024))  # inflates past the 4 MiB default
        too_big = send_one(stub, v2_message(bomb, pb.Encoding.GZIP))
        assert too_big.code == pb.Code.MESSAGE_CORRUPTED and "maximum" in too_big.message
        separator = send_one(stub, v2_message(b"tagged", tag="a\x02b"))
        assert separator.code == pb.Code.ILLEGAL_MESSAGE_TAG
        assert "control character" in separator.message

        zipped = send_one(stub, v2_message(gzip.compress(b"squeezed" * 100), pb.Encoding.GZIP))
        assert zipped.code == pb.Code.OK, zipped
        with PullConsumer(broker.endpoint) as consumer:
            bodies = [m.body for m in consumer.pull(TOPIC, 0, 0, wait_s=5).messages]
        assert bodies == [b"squeezed" * 100], "only the good message is stored"


def test_pull_consumer_skips_a_stored_body_that_does_not_inflate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = data_dir_of(tmp_path)
    create_topics(data_dir, TopicConfig(TOPIC, 1, 1))
    # Around the doors: what an older broker or a damaged disk may have stored.
    # Laid out as the broker process expects it (tests/support/broker_process.py's sizes).
    entries = int(SMALL_FILES_ENV["SKIFF_INDEX_FILE_ENTRIES"])
    config = StoreConfig(
        data_dir=str(data_dir),
        commit_log_file_size=8 * 1024 * 1024,
        consume_queue_units_per_file=int(SMALL_FILES_ENV["SKIFF_CONSUME_QUEUE_FILE_ENTRIES"]),
        max_index_num=entries,
        max_hash_slot_num=entries // 4,
    )
    store = MessageStore(config)
    store.start()
    bad = Message(TOPIC, b"this is not gzip", 0, {"UNIQ_KEY": "BAD"}, sys_flag=COMPRESSED)
    good = [Message(TOPIC, f"good {i}".encode(), 0, {"UNIQ_KEY": f"G{i}"}) for i in range(20)]
    assert store.put_messages([bad]).ok
    assert store.put_messages(good).ok
    store.shutdown()

    with (
        running_broker(tmp_path) as broker,
        PullConsumer(broker.endpoint) as consumer,
        caplog.at_level(logging.WARNING, logger="skiff_broker.client.records"),
    ):
        result = consumer.pull(TOPIC, 0, 0, max_messages=32)
        streamed = list(consumer.read_range(TOPIC, 0, 0, 21))
    assert [m.body for m in result.messages] == [f"good {i}".encode() for i in range(20)]
    assert result.next_offset == 21
    assert [m.message_id for m in streamed] == [f"G{i}" for i in range(20)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and f"topic {TOPIC}, queue 0 at offset 0" in warnings[0]
