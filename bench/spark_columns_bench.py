#!/usr/bin/env python3
"""A Spark task's decoding alone: fetched records into Arrow, per message against by columns.

Builds ``--messages`` stored records of one queue in memory (``--body-bytes`` bodies, a
message ID, and with ``--with-properties`` a tag, two keys and two user properties),
cut into fetches of ``--fetch`` records, and times turning them into the source's record
batches of 4,096 rows two ways, in the same run:

- ``per message``: ``client.records.decode_records`` then ``spark.schema.record_batch``
  (a Python object and a properties dict per message);
- ``columns``: ``spark.record_columns.record_batch_of_records`` (what the reader uses).

No broker and no Spark: this is the executor's own CPU per message, which the Spark
benchmark (``spark_bench.py``) sees mixed with the broker's serving of the fetches.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "broker"))

from skiff_broker.client.records import decode_records, topic_field  # noqa: E402
from skiff_broker.spark.record_columns import record_batch_of_records  # noqa: E402
from skiff_broker.spark.schema import arrow_schema, record_batch  # noqa: E402
from skiff_broker.wire.properties import encode_properties  # noqa: E402
from skiff_broker.wire.record_codec import encode_record_into  # noqa: E402
from skiff_broker.wire.record_layout import QUEUE_OFFSET_OFFSET  # noqa: E402

TOPIC = "bench-columns"
GROUP = "broker-a"
ROWS_PER_BATCH = 4096
HOST = bytes([127, 0, 0, 1, 0, 0, 0x1F, 0x91])


def stored_records(messages: int, body_bytes: int, with_properties: bool) -> bytes:
    blob = bytearray()
    field = topic_field(TOPIC)
    for offset in range(messages):
        properties = {"UNIQ_KEY": f"7F000001{offset:024X}"}
        if with_properties:
            properties |= {"TAGS": "red", "KEYS": f"k{offset} all", "region": "eu", "n": "1"}
        at = len(blob)
        body = (b"%012d" % offset).ljust(body_bytes, b"x")
        encode_record_into(
            blob, field, body, encode_properties(properties), 0, 0, 0, 1_700_000_000_000,
            HOST, HOST, 0, 0,
        )  # fmt: skip
        struct.pack_into(">qq", blob, at + QUEUE_OFFSET_OFFSET, offset, at)
    return bytes(blob)


def per_message(batches: list[bytes]) -> int:
    schema, rows = arrow_schema(), 0
    for records in batches:
        rows += record_batch(decode_records(records, topic=TOPIC), schema, GROUP).num_rows
    return rows


def columns(batches: list[bytes]) -> int:
    schema, rows = arrow_schema(), 0
    for records in batches:
        batch = record_batch_of_records(
            records, topic=TOPIC, group=GROUP, end=1 << 62, schema=schema, check_crc=False
        )
        assert batch is not None, "the benchmark's records must not need the decoder"
        rows += batch.num_rows
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--body-bytes", type=int, default=256)
    parser.add_argument("--with-properties", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    records = stored_records(args.messages, args.body_bytes, args.with_properties)
    # Batches of whole records, as the reader joins its fetches.
    batches, position, starts = [], 0, []
    while position < len(records):
        starts.append(position)
        position += struct.unpack_from(">i", records, position)[0]
    starts.append(len(records))
    for first in range(0, args.messages, ROWS_PER_BATCH):
        last = min(first + ROWS_PER_BATCH, args.messages)
        batches.append(records[starts[first] : starts[last]])

    results = {}
    for name, convert in (("per message", per_message), ("columns", columns)):
        convert(batches)  # warm-up
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            rows = convert(batches)
            times.append(time.perf_counter() - started)
        assert rows == args.messages
        results[name] = statistics.median(times)

    baseline = results["per message"]
    print(
        f"Records to Arrow, {args.messages:,} messages x {args.body_bytes} B body, "
        f"{'tag, keys and user properties' if args.with_properties else 'message ID only'}; "
        f"median of {args.repeats} after a warm-up"
    )
    print()
    print("| decoding | seconds | messages/s | µs per message | time vs per message |")
    print("|---|---|---|---|---|")
    for name, seconds in results.items():
        print(
            f"| {name} | {seconds:.3f} | {args.messages / seconds:,.0f} | "
            f"{seconds / args.messages * 1e6:.2f} | {seconds / baseline:.2f}x |"
        )


if __name__ == "__main__":
    main()
