"""Columns cut straight from fetched records equal the per-message decoder's rows, or
are refused so that the decoder reads them (no Spark needed, only Arrow)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from skiff_broker.client.records import decode_records, topic_field  # noqa: E402
from skiff_broker.spark.record_columns import record_batch_of_records  # noqa: E402
from skiff_broker.spark.schema import arrow_schema, record_batch  # noqa: E402
from skiff_broker.wire.record_codec import encode_record_into  # noqa: E402
from skiff_broker.wire.record_layout import (  # noqa: E402
    COMPRESSED,
    QUEUE_OFFSET_OFFSET,
    STORE_TIMESTAMP_OFFSET,
)

TOPIC = "orders"
GROUP = "broker-a"
HOST = bytes([10, 0, 0, 7, 0, 0, 0x1F, 0x91])
HOST_V6 = bytes(16) + bytes([0, 0, 0x1F, 0x91])
FIRST_OFFSET = 40


def records(*properties: bytes, sys_flag: int = 0, host: bytes = HOST) -> bytes:
    """Stored records of queue 3 from FIRST_OFFSET on, one per properties field."""
    blob = bytearray()
    for i, raw in enumerate(properties):
        at = len(blob)
        body = b"body-%d" % i * (i + 1)
        encode_record_into(
            blob, topic_field(TOPIC), body, raw, 3, 0, sys_flag, 1_700_000_000_000 + i,
            HOST, host, 0, 0,
        )  # fmt: skip
        struct.pack_into(">qq", blob, at + QUEUE_OFFSET_OFFSET, FIRST_OFFSET + i, 5000 + at)
        struct.pack_into(">q", blob, at + STORE_TIMESTAMP_OFFSET, 1_700_000_000_500 + i)
    return bytes(blob)


def columns(data: bytes, end: int = 1 << 62):
    return record_batch_of_records(
        data, topic=TOPIC, group=GROUP, end=end, schema=arrow_schema(), check_crc=True
    )


def decoded(data: bytes, end: int = 1 << 62):
    messages = [m for m in decode_records(data, topic=TOPIC) if m.queue_offset < end]
    return record_batch(messages, arrow_schema(), GROUP)


USUAL = [
    b"UNIQ_KEY\x01AC1100070001\x02",
    b"UNIQ_KEY\x01AC1100070002\x02TAGS\x01red\x02KEYS\x01k1 k2\x02color\x01blue\x02n\x01\x02",
    b"KEYS\x01a  b\x02TAGS\x01\x02UNIQ_KEY\x01\x02",  # empty tag and ID, an empty key
    b"",  # no properties at all: the offset message ID
    b"solo\x02UNIQ_KEY\x01X\x02a\x01b\x01c\x02\x02",  # lenient: no \x01, two \x01, empty pair
    b"UNIQ_KEY\x01Z\x02\xc3\xa9t\xc3\xa9\x01caf\xc3\xa9\x02__RMQ.TRANSIENT.X\x01y\x02",
]


def test_usual_records_give_the_decoders_rows_cell_for_cell():
    data = records(*USUAL)
    batch = columns(data)
    assert batch is not None
    assert batch.equals(decoded(data))
    row = batch.slice(1, 1).to_pylist()[0]
    assert (row["tag"], row["keys"], row["properties"]) == (
        "red",
        ["k1", "k2"],
        [("color", "blue"), ("n", "")],
    )
    assert batch.slice(3, 1).to_pylist()[0]["message_id"] == "0A00000700001F91" + "%016X" % (
        5000 + len(records(*USUAL[:3]))
    )


def test_rows_at_or_past_the_end_offset_are_left_out():
    data = records(*USUAL)
    batch = columns(data, end=FIRST_OFFSET + 2)
    assert batch.num_rows == 2
    assert batch.equals(decoded(data, end=FIRST_OFFSET + 2))
    assert columns(data, end=FIRST_OFFSET).num_rows == 0


@pytest.mark.parametrize(
    "data",
    [
        records(b"UNIQ_KEY\x01A\x02x\x011\x02x\x012\x02"),  # a name twice: first place, last value
        # The same beside records without properties, so pairs are not more than rows.
        records(b"UNIQ_KEY\x01A\x02x\x011\x02x\x012\x02", b"", b""),
        records(b"UNIQ_KEY\x01A\x02x\x01\xff\x02"),  # not UTF-8: replacement marks
        records(b"UNIQ_KEY\x01A\x02", host=HOST_V6),
        records(b"UNIQ_KEY\x01A\x02", sys_flag=COMPRESSED),
        records(*USUAL)[:-5],  # the last record cut short
        records(*USUAL).replace(b"body-0", b"bodyX0"),  # a body failing its CRC
    ],
    ids=[
        "duplicate-name",
        "duplicate-name-beside-empty",
        "not-utf8",
        "ipv6-host",
        "compressed",
        "cut-short",
        "bad-crc",
    ],
)
def test_records_the_decoder_must_read_are_refused(data):
    assert columns(data) is None


_PROPERTY_BYTES = st.lists(
    st.sampled_from(
        [b"a", b"bc", b"\x01", b"\x02", b"\xc3\xa9", b"UNIQ_KEY", b"TAGS", b"KEYS", b" "]
    ),
    max_size=10,
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PROPERTY_BYTES, min_size=1, max_size=6))
def test_any_properties_give_the_decoders_rows_or_are_refused(properties):
    """Whatever the properties bytes (separators anywhere, doubled, missing, names without
    values), the columns equal the decoder's rows unless they are refused."""
    data = records(*properties)
    batch = columns(data)
    if batch is None:
        return
    assert batch.equals(decoded(data))
    event("columns")
