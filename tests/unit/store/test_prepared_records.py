"""The Append door gives one verdict whichever way it checks a run.

A long run of usual records is checked with numpy over every record at once
(``_usual_run``); anything else, and any refusal, goes record by record. Here the
same appends go through the door as it runs and with the numpy path turned off:
the stored bytes, what the dispatcher is handed and the refusal must be the same.
Runs are made as ``BatchingProducer`` sends them, then one record is changed in a
way a client could (another body length, ID or topic, a flag, a cut, a bit flip).
"""

from __future__ import annotations

import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skiff_broker.store import prepared_records as door
from skiff_broker.store.commit_log import AppendRejected
from skiff_broker.store.dispatch_request import DispatchRequest
from skiff_broker.wire.properties import ID_ONLY_PREFIX, encode_properties, id_only_properties
from skiff_broker.wire.property_names import message_id_problem
from skiff_broker.wire.record_codec import encode_client_record, topic_field
from skiff_broker.wire.record_layout import (
    COMPRESSED,
    PLAIN_HEADER,
    QUEUE_OFFSET_OFFSET,
    STORE_TIMESTAMP_OFFSET,
)

TOPIC = "orders"
RUN = door._RUN_MIN_RECORDS
MAX_MESSAGE_SIZE = 600
HOSTS = {"born_host": bytes([127, 0, 0, 1, 0, 0, 15, 160]), "store_host": bytes(8)}
HOST_V6 = {"born_host": bytes(16) + bytes(4), "store_host": bytes(8)}


def record(
    body: bytes,
    message_id: str = "0A0000010000A1B2C3D4E5F60000000A",
    *,
    topic: str = TOPIC,
    properties: bytes | None = None,
    born: int = 1_700_000_000_000,
    sys_flag: int = 0,
) -> bytes:
    raw = id_only_properties(message_id) if properties is None else properties
    return encode_client_record(topic_field(topic), body, raw, born, sys_flag)


def verdict(data: bytes, *, numpy_path: bool, **hosts: bytes) -> object:
    """What the door answers: the prepared append, or the refusal's status and reason."""
    saved = door._RUN_MIN_RECORDS
    door._RUN_MIN_RECORDS = saved if numpy_path else 10**9
    try:
        prepared = door.prepare_records(
            data,
            TOPIC,
            5,
            max_message_size=MAX_MESSAGE_SIZE,
            born_default=1_800_000_000_000,
            **(hosts or HOSTS),
        )
    except AppendRejected as exc:
        return ("refused", exc.status, exc.reason)
    finally:
        door._RUN_MIN_RECORDS = saved
    layout = layout_of(prepared)
    return (
        without_commit_log_fields(prepared.blob, layout),
        prepared.topic,
        prepared.queue_id,
        layout,
        [int(size) for size in prepared.body_sizes],
    )


def without_commit_log_fields(blob: bytearray, layout: list[tuple]) -> bytes:
    """``blob`` with each record's QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP zeroed:
    the commit log writes those when it appends (test_queue_runs compares what it wrote)."""
    blob = bytearray(blob)
    for start, timestamp_at, _, _ in layout:
        blob[start + QUEUE_OFFSET_OFFSET : start + QUEUE_OFFSET_OFFSET + 16] = bytes(16)
        blob[start + timestamp_at : start + timestamp_at + 8] = bytes(8)
    return bytes(blob)


def layout_of(prepared: door.PreparedRecords) -> list[tuple]:
    """The per-record layout the commit log is handed; for a run, what it stands for."""
    run = prepared.run
    if run is None:
        return prepared.layout
    assert not prepared.layout and prepared.starts is not None
    return [
        (
            start,
            STORE_TIMESTAMP_OFFSET,
            True,
            DispatchRequest(run.topic, run.queue_id, 0, 0, size, 0, 0, "", [message_id]),
        )
        for start, size, message_id in zip(
            prepared.starts.tolist(), run.sizes, run.message_ids, strict=True
        )
    ]


def _compressed(body: bytes) -> bytes:
    return zlib.compress(body)


# Ways a client could make one record of a run unusual, or wrong.
CHANGES = {
    "none": lambda body: record(body),
    "born unset": lambda body: record(body, born=0),
    "longer ID": lambda body: record(body, "0A0000010000A1B2C3D4E5F60000000AFF"),
    "blank ID": lambda body: record(body, " " * 32),
    "blank ID, other white space": lambda body: record(body, "\t\x0b\x0c\r\x1c\x1d\x1e\x1f" * 4),
    "spaces in ID": lambda body: record(body, "0A000001 0000A1B2C3D4E5F6000000\t"),
    "empty ID": lambda body: record(body, ""),
    "non-ASCII ID": lambda body: record(body, "0A0000010000A1B2C3D4E5F6000000é"),
    "ID not UTF-8": lambda body: record(body, properties=ID_ONLY_PREFIX + b"\xff" * 32 + b"\x02"),
    # IDs of the usual length whose properties are not one name\x01value\x02 pair.
    "separator in ID": lambda body: record(body, "0A0000010000A1B2\x02C3D4E5F60000000"),
    "second value in ID": lambda body: record(body, "0A0000010000A1B2\x01C3D4E5F60000000"),
    "unterminated": lambda body: record(
        body, properties=id_only_properties("0A0000010000A1B2C3D4E5F60000000A")[:-1] + b"A"
    ),
    "tags too": lambda body: record(
        body, properties=encode_properties({"UNIQ_KEY": "ID-1", "TAGS": "TagA"})
    ),
    "reserved property": lambda body: record(
        body, properties=encode_properties({"UNIQ_KEY": "ID-1", "REAL_TOPIC": "x"})
    ),
    "other topic": lambda body: record(body, topic="ordes"),
    "compressed": lambda body: record(_compressed(body), sys_flag=COMPRESSED),
    "compressed, not deflate": lambda body: record(body, sys_flag=COMPRESSED),
    "transaction flag": lambda body: record(body, sys_flag=0x4),
    "body too large": lambda body: record(body * 40),
}


@st.composite
def runs(draw: st.DrawFn) -> tuple[bytes, str]:
    count = draw(st.integers(RUN, RUN + 40))
    bodies = [draw(st.binary(min_size=1, max_size=300)) for _ in range(count)]
    records = [record(body) for body in bodies]
    change = draw(st.sampled_from(sorted(CHANGES)))
    at = draw(st.integers(0, count - 1))
    records[at] = CHANGES[change](bodies[at])
    data = b"".join(records)
    damage = draw(st.sampled_from(["none", "flip", "cut", "trailing"]))
    if damage == "flip":
        position = draw(st.integers(0, len(data) - 1))
        flipped = data[position] ^ 1 << draw(st.integers(0, 7))
        data = data[:position] + bytes([flipped]) + data[position + 1 :]
    elif damage == "cut":
        data = data[: draw(st.integers(1, len(data) - 1))]
    elif damage == "trailing":
        data += draw(st.binary(min_size=1, max_size=PLAIN_HEADER.size + 20))
    return data, f"{change} at {at}, damage {damage}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs())
def test_a_run_gets_the_same_verdict_with_or_without_numpy(run: tuple[bytes, str]) -> None:
    data, _what = run
    assert verdict(data, numpy_path=True) == verdict(data, numpy_path=False)


USUAL = ["none", "born unset", "spaces in ID"]


@pytest.mark.parametrize("change", USUAL)
def test_a_producers_run_is_prepared_with_numpy_as_the_loop_would(change: str) -> None:
    bodies = [bytes([n]) * (1 + n * 7 % 500) for n in range(RUN + 3)]
    data = b"".join(CHANGES[change](body) for body in bodies)
    starts = door.record_starts(data, 0, len(data))
    fast = door._usual_run(
        data, starts, TOPIC, 5, HOSTS["born_host"], HOSTS["store_host"], MAX_MESSAGE_SIZE, 9
    )
    assert fast is not None, "a producer's run must take the numpy path"
    assert verdict(data, numpy_path=True) == verdict(data, numpy_path=False)
    assert list(fast.body_sizes) == [len(body) for body in bodies]


@pytest.mark.parametrize("change", sorted(set(CHANGES) - set(USUAL)))
def test_an_unusual_record_sends_the_run_to_the_loop(change: str) -> None:
    bodies = [bytes([n]) * (1 + n) for n in range(RUN)]
    records = [record(body) for body in bodies]
    records[RUN // 2] = CHANGES[change](bodies[RUN // 2])
    data = b"".join(records)
    starts = door.record_starts(data, 0, len(data))
    hosts = (HOSTS["born_host"], HOSTS["store_host"])
    assert door._usual_run(data, starts, TOPIC, 5, *hosts, MAX_MESSAGE_SIZE, 9) is None
    assert verdict(data, numpy_path=True) == verdict(data, numpy_path=False)


def test_hosts_that_grow_the_records_are_written_by_the_loop() -> None:
    data = b"".join(record(bytes([n]) * 10) for n in range(RUN))
    assert verdict(data, numpy_path=True, **HOST_V6) == verdict(data, numpy_path=False, **HOST_V6)


def test_the_runs_blank_bytes_are_what_the_id_rule_strips() -> None:
    # The array path judges a run's IDs blank byte by byte; message_id_problem by strip().
    for byte in range(256):
        if door._ID_BYTES[byte]:
            blank = message_id_problem(chr(byte) * 3) is not None
            assert bool(door._BLANK_ID_BYTES[byte]) == blank, hex(byte)
