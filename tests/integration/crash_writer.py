"""A writer process for the crash tests: appends deterministic messages until it is killed.

    python tests/integration/crash_writer.py --data-dir D --flush-type SYNC_FLUSH \\
        --start-seq N [--concurrency K]

Message ``seq`` has content that is a pure function of ``seq`` (see
:func:`expected_message`), so a test can check any record it reads back without
knowing what the writer did. After each put returns PUT_OK the writer prints one
acknowledgement line and flushes stdout:

    ack <seq> <physical offset> <size> <queue id> <queue offset> <flushed offset>

A line starting with ``#`` is information (``# start clean=1``). The test reads
the lines after SIGKILL; a torn last line is ignored.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import sys

_BROKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "broker")
if _BROKER not in sys.path:
    sys.path.insert(0, _BROKER)

from skiff_broker.store.config import FlushType, StoreConfig  # noqa: E402
from skiff_broker.store.message import Message  # noqa: E402
from skiff_broker.store.message_store import MessageStore  # noqa: E402
from skiff_broker.store.results import PutResult  # noqa: E402

TOPIC = "crash-test"
QUEUES = 4
# Small segments, consume-queue files and index files, so that kills also land
# around segment rolls, BLANK records and index-file rolls.
SEGMENT_SIZE = 256 * 1024


def store_config(data_dir: str, flush_type: FlushType) -> StoreConfig:
    """The settings the writer runs with; the test must open the store the same way."""
    return StoreConfig(
        data_dir=data_dir,
        flush_type=flush_type,
        commit_log_file_size=SEGMENT_SIZE,
        consume_queue_units_per_file=300,
        max_message_size=16 * 1024,
        max_hash_slot_num=1000,
        max_index_num=4000,
        flush_interval_commit_log=0.02,
        flush_commit_log_least_pages=2,
        flush_commit_log_thorough_interval=0.2,
        flush_interval_consume_queue=0.1,
        sync_flush_timeout=30.0,
        # The machine's own disk use must never make retention delete or refuse anything.
        disk_max_used_space_ratio=100,
        disk_space_clean_forcibly_ratio=1.0,
        disk_space_warning_level_ratio=1.0,
    )


def expected_message(seq: int) -> Message:
    """Message ``seq``: body of seeded pseudo-random bytes whose length (1..2000) varies."""
    rnd = random.Random(seq)
    body = rnd.randbytes(rnd.randint(1, 2000))
    return Message(
        topic=TOPIC,
        body=body,
        queue_id=seq % QUEUES,
        properties={
            "KEYS": f"k{seq}",
            "UNIQ_KEY": f"U{seq:020d}",
            "SEQ": str(seq),
        },
    )


def _ack(seq: int, result: PutResult, i: int, store: MessageStore) -> str:
    append = result.append
    assert append is not None
    return (
        f"ack {seq} {append.physical_offsets[i]} {append.sizes[i]} {seq % QUEUES} "
        f"{append.queue_offsets[i]} {store.commit_log.flushed_offset}\n"
    )


def _fail(result: PutResult) -> None:
    sys.stderr.write(f"put failed: {result.status.value}: {result.reason}\n")
    sys.stderr.flush()
    os._exit(2)


def run_sequential(store: MessageStore, start_seq: int) -> None:
    out = sys.stdout
    for seq in itertools.count(start_seq):
        result = store.put_message(expected_message(seq))
        if not result.ok:
            _fail(result)
        out.write(_ack(seq, result, 0, store))
        out.flush()


async def run_concurrent(store: MessageStore, start_seq: int, concurrency: int) -> None:
    """K tasks append batches of 1..3 messages; their flush waits overlap (group commit)."""
    counter = itertools.count(start_seq)
    out = sys.stdout

    async def worker(worker_id: int) -> None:
        rnd = random.Random(start_seq * 1000 + worker_id)
        while True:
            seqs = [next(counter) for _ in range(rnd.randint(1, 3))]
            result = await store.put_messages_async([expected_message(s) for s in seqs])
            if not result.ok:
                _fail(result)
            out.write("".join(_ack(s, result, i, store) for i, s in enumerate(seqs)))
            out.flush()

    await asyncio.gather(*(worker(i) for i in range(concurrency)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--flush-type", choices=[t.value for t in FlushType], required=True)
    parser.add_argument("--start-seq", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args()

    store = MessageStore(store_config(args.data_dir, FlushType(args.flush_type)))
    store.start()
    sys.stdout.write(f"# start clean={int(store.clean_start)}\n")
    sys.stdout.flush()
    if args.concurrency > 1:
        asyncio.run(run_concurrent(store, args.start_seq, args.concurrency))
    else:
        run_sequential(store, args.start_seq)


if __name__ == "__main__":
    main()
