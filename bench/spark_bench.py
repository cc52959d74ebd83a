#!/usr/bin/env python3
"""Batch-read throughput of the Skiff Spark data source, against Parquet in the same run.

Starts a real broker, fills a topic with ``--messages`` messages of
``--body-bytes`` each, then times in one local Spark session (``local[N]``):

- ``skiff``: ``spark.read.format("skiff")`` of the whole topic, every column
  materialised (written to Spark's ``noop`` sink);
- ``parquet``: the same rows, saved once as Parquet on local disk, read the same way;
- ``python source floor``: the same rows again, handed to Spark as ready Arrow batches
  (read from a local Arrow file) by a Python data source that does nothing else, with
  the skiff source's schema and partitions: what any Python data source costs Spark
  before it reads a byte of its own, the floor under the skiff read;
- ``skiff pullBatchSize=N``: with ``--pull-batch-size N`` (repeatable), the Skiff read
  again with that option, to compare fetch sizes in the same run;
- ``fetch only``: no Spark, one thread fetching every queue's records with
  ``PullConsumer.fetch_range`` (default fetch size) and decoding nothing: the floor the
  broker's serving of the fetches sets under any Skiff read.

Each read runs ``--repeats`` times after one warm-up; the table shows the median,
messages/s, MB/s of message bodies, and the ratio of the Skiff read to the
Parquet read. Needs ``pip install '.[spark]'`` and Java 17+.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "broker"))
sys.path.insert(0, str(ROOT))

from tests.support.broker_process import running_broker  # noqa: E402
from tests.support.queue_ends import wait_for_messages  # noqa: E402

from skiff_broker.client.admin import AdminClient  # noqa: E402
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage  # noqa: E402
from skiff_broker.client.pull_consumer import DEFAULT_BATCH_SIZE, PullConsumer  # noqa: E402
from skiff_broker.spark.schema import SCHEMA_DDL, arrow_schema  # noqa: E402
from skiff_broker.spark.session import local_session  # noqa: E402

TOPIC = "bench-spark"
SEND_BATCH = 512
MB = 1e6


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def fill(endpoint: str, messages: int, body_bytes: int, queues: int) -> int:
    with AdminClient(endpoint) as admin:
        admin.create_topic(TOPIC, read_queues=queues)
    sent = 0
    with MessagingClient(endpoint, timeout=60) as client:
        while sent < messages:
            count = min(SEND_BATCH, messages - sent)
            client.send(
                [
                    OutgoingMessage(TOPIC, (b"%012d" % (sent + i)).ljust(body_bytes, b"x"))
                    for i in range(count)
                ]
            )
            sent += count
    wait_for_messages(endpoint, TOPIC, messages)
    return messages * body_bytes


def fetch_everything(endpoint: str, queues: int) -> None:
    with PullConsumer(endpoint) as consumer:
        for queue in range(queues):
            end = consumer.max_offset(TOPIC, queue)
            for _ in consumer.fetch_range(TOPIC, queue, 0, end):
                pass


def arrow_file_source(path: str, partitions: int) -> type:
    """A Python data source ``arrow-file`` that yields the record batches of the Arrow file
    at ``path``, spread over ``partitions`` partitions, and does nothing else."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Reader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):
            import pyarrow.ipc

            batches = pyarrow.ipc.open_file(path)
            for i in range(partition.value, batches.num_record_batches, partitions):
                yield batches.get_batch(i)

    class ArrowFileSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrow-file"

        def schema(self) -> str:
            return SCHEMA_DDL

        def reader(self, schema):
            return Reader()

    return ArrowFileSource


def write_arrow_file(parquet_path: str, path: str, rows_per_batch: int) -> None:
    """The rows of a Parquet copy as an Arrow file in the skiff source's schema."""
    import pyarrow.ipc
    import pyarrow.parquet

    schema = arrow_schema()
    table = pyarrow.parquet.read_table(parquet_path).select(schema.names).cast(schema)
    with pyarrow.ipc.new_file(path, schema) as out:
        for batch in table.to_batches(max_chunksize=rows_per_batch):
            out.write_batch(batch)


def timed(action, repeats: int) -> list[float]:
    action()  # warm-up: Python workers, JIT, page cache
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--body-bytes", type=int, default=256)
    parser.add_argument("--queues", type=int, default=4, help="queues of the topic (partitions)")
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--pull-batch-size",
        type=int,
        action="append",
        default=[],
        help="also time the Skiff read with this pullBatchSize option (repeatable)",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="skiff-spark-bench-") as scratch:
        scratch_path = Path(scratch)
        with running_broker(scratch_path) as broker:
            note(f"filling {TOPIC}: {args.messages} x {args.body_bytes} B ...")
            started = time.perf_counter()
            body_total = fill(broker.endpoint, args.messages, args.body_bytes, args.queues)
            note(f"filled in {time.perf_counter() - started:.1f} s; starting Spark ...")
            spark = local_session("skiff-spark-bench", cores=args.cores)
            try:

                def skiff_read(**options: str):
                    reader = (
                        spark.read.format("skiff")
                        .option("endpoints", broker.endpoint)
                        .option("topic", TOPIC)
                    )
                    for name, value in options.items():
                        reader = reader.option(name, value)
                    return reader.load()

                skiff = skiff_read()
                parquet_path = str(scratch_path / "messages.parquet")
                skiff.write.parquet(parquet_path)
                parquet = spark.read.parquet(parquet_path)
                rows = parquet.count()
                if rows != args.messages:
                    raise SystemExit(f"parquet copy holds {rows} rows, not {args.messages}")

                arrow_path = str(scratch_path / "messages.arrow")
                write_arrow_file(parquet_path, arrow_path, DEFAULT_BATCH_SIZE)
                spark.dataSource.register(arrow_file_source(arrow_path, args.queues))
                floor = spark.read.format("arrow-file").load()

                def read_all(frame):
                    return lambda: frame.write.format("noop").mode("overwrite").save()

                results = {}
                frames = [("skiff", skiff)]
                frames += [
                    (f"skiff pullBatchSize={size}", skiff_read(pullBatchSize=str(size)))
                    for size in args.pull_batch_size
                ]
                frames += [("python source floor", floor), ("parquet", parquet)]
                for name, frame in frames:
                    note(f"timing {name} reads ...")
                    results[name] = timed(read_all(frame), args.repeats)
                note("timing fetches alone ...")
                results["fetch only"] = timed(
                    lambda: fetch_everything(broker.endpoint, args.queues), args.repeats
                )
            finally:
                spark.stop()

    baseline = statistics.median(results["parquet"])
    print(
        f"Spark batch read, {args.messages:,} messages x {args.body_bytes} B body "
        f"({body_total / MB:.1f} MB of bodies), {args.queues} queues, local[{args.cores}], "
        f"{os.cpu_count()} CPUs; median of {args.repeats} after a warm-up"
    )
    print()
    print("| source | seconds | messages/s | MB/s (bodies) | time vs parquet |")
    print("|---|---|---|---|---|")
    for name, times in results.items():
        median = statistics.median(times)
        print(
            f"| {name} | {median:.2f} | {args.messages / median:,.0f} | "
            f"{body_total / MB / median:.1f} | {median / baseline:.2f}x |"
        )


if __name__ == "__main__":
    main()
