"""What the Append door accepts, recovery keeps, byte for byte (the issue's differential).

Valid records are mutated (bit flips, byte changes in every field, truncations,
trailing bytes, unterminated or malformed properties, bad UTF-8, random bytes)
and sent, each followed by a good record, through the real door in a writer
process that is then killed with SIGKILL. The next start finds the abort file
and scans the commit log; every record the door acknowledged, and every good
record after it, must still be there exactly as written.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skiff_broker.store.message_store import MessageStore
from skiff_broker.wire.properties import encode_properties
from skiff_broker.wire.record_codec import encode_client_record
from skiff_broker.wire.record_layout import PLAIN_HEADER

WRITER = Path(__file__).with_name("door_writer.py")
sys.path.insert(0, str(WRITER.parent))
from door_writer import store_config  # noqa: E402

TOPIC = b"orders"
HEADER = PLAIN_HEADER.size
# Mutations that leave a record recovery would cut: the door must refuse them all.
ALWAYS_REFUSED = {"unterminated", "empty name", "two separators", "bad UTF-8", "topic ends in NUL"}


def framed(topic: bytes, body: bytes, properties: bytes) -> bytes:
    """A record with these raw fields and consistent lengths and CRC (fields unchecked)."""
    return encode_client_record(bytes((len(topic),)) + topic, body, properties, 1)


@dataclasses.dataclass(frozen=True)
class Candidate:
    kind: str
    data: bytes


_names = st.text(
    st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1, max_size=8
)
_values = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=12)


@st.composite
def candidates(draw: st.DrawFn) -> Candidate:
    body = draw(st.binary(min_size=1, max_size=120))
    properties = draw(st.dictionaries(_names, _values, max_size=3))
    properties["UNIQ_KEY"] = draw(st.text("0123456789ABCDEF", min_size=1, max_size=32))
    raw_properties = encode_properties(properties)
    good = framed(TOPIC, body, raw_properties)
    kind = draw(
        st.sampled_from(
            [
                "flip",
                "byte in a field",
                "truncated",
                "trailing bytes",
                "unterminated",
                "empty name",
                "two separators",
                "bad UTF-8",
                "topic ends in NUL",
                "random properties",
                "random bytes",
            ]
        )
    )
    data = good
    if kind == "flip":
        at = draw(st.integers(0, len(good) - 1))
        data = _with_byte(good, at, good[at] ^ (1 << draw(st.integers(0, 7))))
    elif kind == "byte in a field":
        topic_at = HEADER + len(body)
        fields = {
            "header": (0, HEADER),
            "body": (HEADER, topic_at),
            "topic length": (topic_at, topic_at + 1),
            "topic": (topic_at + 1, topic_at + 1 + len(TOPIC)),
            "properties length": (topic_at + 1 + len(TOPIC), topic_at + 3 + len(TOPIC)),
            "properties": (topic_at + 3 + len(TOPIC), len(good)),
        }
        start, end = fields[draw(st.sampled_from(sorted(fields)))]
        data = _with_byte(good, draw(st.integers(start, end - 1)), draw(st.integers(0, 255)))
    elif kind == "truncated":
        data = good[: draw(st.integers(0, len(good) - 1))]
    elif kind == "trailing bytes":
        data = good + draw(st.binary(min_size=1, max_size=40))
    elif kind == "unterminated":
        data = framed(TOPIC, body, raw_properties[:-1])
    elif kind == "empty name":
        data = framed(TOPIC, body, raw_properties + b"\x01value\x02")
    elif kind == "two separators":
        data = framed(TOPIC, body, raw_properties + b"a\x01b\x01c\x02")
    elif kind == "bad UTF-8":
        data = framed(TOPIC, body, raw_properties + b"a\x01\xff\xfe\x02")
    elif kind == "topic ends in NUL":
        data = framed(TOPIC + b"\x00", body, raw_properties)
    elif kind == "random properties":
        data = framed(TOPIC, body, draw(st.binary(max_size=60)))
    else:
        data = draw(st.binary(min_size=1, max_size=300))
    return Candidate(kind, data)


def _with_byte(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + bytes((value,)) + data[at + 1 :]


GOOD = framed(TOPIC, b"after", encode_properties({"UNIQ_KEY": "GOOD"}))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(candidates(), min_size=20, max_size=40))
def test_every_record_the_door_accepts_survives_a_crash_byte_for_byte(
    tmp_path_factory: object, batch: list[Candidate]
) -> None:
    data_dir = str(tmp_path_factory.mktemp("door"))  # type: ignore[attr-defined]
    lines = []
    for candidate in batch:
        lines.append(f"{TOPIC.hex()} {candidate.data.hex() or '00'}")
        lines.append(f"{TOPIC.hex()} {GOOD.hex()}")
    writer = subprocess.Popen(
        [sys.executable, str(WRITER), data_dir],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    writer.stdin.write("\n".join(lines) + "\n")
    writer.stdin.close()
    answers = []
    for line in writer.stdout:
        if line.strip() == "done":
            break
        answers.append(line.split(maxsplit=3))
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    assert len(answers) == len(lines), "the writer stopped early"
    acked = []
    for candidate, answer, good_answer in zip(batch, answers[::2], answers[1::2], strict=True):
        assert good_answer[0] == "ack", good_answer
        if candidate.kind in ALWAYS_REFUSED:
            assert answer[0] == "refused", f"the door stored a {candidate.kind} record"
        if answer[0] == "ack":
            acked.append(answer)
        acked.append(good_answer)

    config = store_config(data_dir)
    assert os.path.exists(config.abort_path), "the writer must have left as a crash leaves"
    store = MessageStore(config)
    store.start()
    try:
        for _, physical, size, stored in acked:
            assert store.commit_log.read(int(physical), int(size)) == bytes.fromhex(stored)
        last_physical, last_size = int(acked[-1][1]), int(acked[-1][2])
        assert store.commit_log.max_offset == last_physical + last_size
    finally:
        store.shutdown()
