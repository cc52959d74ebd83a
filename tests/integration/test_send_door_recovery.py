"""What SendMessage accepts, a crash keeps: a property test against a real broker process.

Hypothesis builds batches of official-protocol messages with arbitrary text in
every field that becomes a record property (tag, keys, message ID, user
properties, control characters included) and bodies flagged GZIP that are or
are not gzip. The broker (SYNC_FLUSH) answers each message; it is then killed
with SIGKILL and restarted, and every message answered OK must come back with
its body and properties, while nothing refused may appear.
"""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.support.broker_process import create_topics, data_dir_of, running_broker, start_broker
from tests.support.queue_ends import wait_until_dispatched

from skiff_broker.client.pull_consumer import PullConsumer
from skiff_broker.metadata.topic_table import TopicConfig

TOPIC = "send-door"
_ids = itertools.count()
# Any text, with the record's separators and NUL drawn often.
_text = st.text(
    st.one_of(st.sampled_from("\x00\x01\x02 |"), st.characters(codec="utf-8")), max_size=10
)


@st.composite
def v2_messages(draw: st.DrawFn) -> tuple[pb.Message, bytes]:
    """A message, and the body a consumer should read if it is stored."""
    plain = draw(st.binary(min_size=1, max_size=200))
    body, encoding = plain, pb.Encoding.IDENTITY
    if draw(st.booleans()):
        encoding = pb.Encoding.GZIP
        body = gzip.compress(plain) if draw(st.booleans()) else plain
    system = pb.SystemProperties(
        # Unique, so answers and read-back messages can be matched.
        message_id=f"{next(_ids)}-{draw(_text)}",
        body_encoding=encoding,
        message_type=pb.MessageType.NORMAL,
        born_timestamp=Timestamp(seconds=1_700_000_000),
    )
    if draw(st.booleans()):
        system.tag = draw(_text)
    system.keys.extend(draw(st.lists(_text, max_size=2)))
    message = pb.Message(topic=pb.Resource(name=TOPIC), body=body, system_properties=system)
    for name, value in draw(st.dictionaries(_text, _text, max_size=3)).items():
        message.user_properties[name] = value
    return message, plain


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches=st.lists(st.lists(v2_messages(), min_size=1, max_size=8), min_size=4, max_size=8))
def test_every_message_send_accepts_survives_a_crash(
    tmp_path_factory: object, batches: list[list[tuple[pb.Message, bytes]]]
) -> None:
    tmp_path: Path = tmp_path_factory.mktemp("send")  # type: ignore[attr-defined]
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 1, 1))
    accepted: dict[str, tuple[pb.Message, bytes]] = {}
    refused: set[str] = set()
    broker = start_broker(tmp_path, "--flush-type", "SYNC_FLUSH")
    try:
        with grpc.insecure_channel(broker.endpoint) as channel:
            stub = MessagingServiceStub(channel)
            for batch in batches:
                request = spb.SendMessageRequest(messages=[m for m, _ in batch])
                answer = stub.SendMessage(request, timeout=10)
                assert len(answer.entries) == len(batch)
                for (message, plain), entry in zip(batch, answer.entries, strict=True):
                    message_id = message.system_properties.message_id
                    assert entry.status.code != pb.Code.INTERNAL_SERVER_ERROR, entry.status
                    if entry.status.code == pb.Code.OK:
                        accepted[message_id] = (message, plain)
                    else:
                        assert entry.status.message.strip(), "a refusal must say why"
                        refused.add(message_id)
    finally:
        broker.kill()

    with running_broker(tmp_path) as restarted, PullConsumer(restarted.endpoint) as consumer:
        wait_until_dispatched(restarted.endpoint)  # recovery redispatches in the background
        stored = list(consumer.read_range(TOPIC, 0, 0, consumer.max_offset(TOPIC, 0)))
        log = restarted.log()
    assert "commit log cut" not in log
    by_id = {m.message_id: m for m in stored}
    assert not refused & set(by_id), "a refused message was stored"
    assert set(by_id) == set(accepted), "an acknowledged message is missing after the crash"
    for message_id, (message, plain) in accepted.items():
        got = by_id[message_id]
        assert got.body == plain
        assert got.properties == dict(message.user_properties)
        assert got.tag == message.system_properties.tag
        assert got.keys == tuple(message.system_properties.keys)
