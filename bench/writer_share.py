#!/usr/bin/env python3
"""The store writer's CPU per message: what one store process would spend per message if
front processes did the protocol work, the serial part of the multi-core projection.

A store process behind front processes would do only what cannot be spread over them:
append to the one commit log, dispatch to the consume queues and the index, flush. This
measures that, in one process, on a fresh store (ASYNC_FLUSH, 1 KiB bodies with a tag
and a unique key, as the official clients send them), in two hand-offs and at several
batch sizes (how many messages arrive together, as the send coalescer gathers them):

- ``messages``: ``put_messages_async`` of ``Message`` objects, what the v2 door hands the
  store today (the record encoding runs in the store's process);
- ``records``: runs already encoded as commit-log records (the record door's path), checked
  and filled in (``prepare_records``) and appended (``put_records_async``) in the store's
  process: fronts that encode, the store checks;
- ``prepared``: the same runs checked and filled in before the clock starts: fronts that
  encode and check, the store only appends and dispatches.

Per shape it prints CPU µs per message of the whole process (appending thread,
dispatcher, flush) and of the appending thread alone, each from the start of the puts
until the dispatcher has caught up; then (``socket``) what reading the runs off a Unix
socket from another process costs the store's process per message, the hand-off itself.
With ``--front-us F`` (the broker's CPU per message outside the store, from
``send_timeline.py``'s split) it prints the Amdahl projection to 4, 8 and 16 cores for
each shape: speedup(N) = 1 / (s + (1 - s) / N), s = W / (W + F), where W is the shape's
process figure plus the socket's at the same batch.

    python bench/writer_share.py [--messages 60000] [--batches 1,16,64] [--rounds 3]
                                 [--front-us F] [--data-dir .]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "broker"))

from skiff_broker.client.message_id import new_message_id
from skiff_broker.client.records import encode_record, topic_field
from skiff_broker.store.config import FlushType, StoreConfig
from skiff_broker.store.message import Message, Property
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.prepared_records import PreparedRecords, prepare_records
from skiff_broker.wire.properties import encode_properties

TOPIC = "WriterShare"
QUEUES = 8
BODY = 1024
MiB = 1024 * 1024
POOL = 4096


def messages_pool() -> list[Message]:
    body = os.urandom(BODY)
    prefix = os.urandom(10).hex().upper()
    born = int(time.time() * 1000)
    return [
        Message(
            topic=TOPIC,
            body=body,
            queue_id=i % QUEUES,
            properties={Property.TAGS: "TagA", Property.UNIQ_KEY: f"{prefix}{i:012X}"},
            born_timestamp=born,
            born_host="10.0.0.7:53412",
        )
        for i in range(POOL)
    ]


def encoded_runs(batch: int) -> list[bytes]:
    """Runs of ``batch`` encoded records, as a front process would send them."""
    field = topic_field(TOPIC)
    body = os.urandom(BODY)
    born = int(time.time() * 1000)
    runs = []
    for _ in range(max(1, POOL // batch)):
        runs.append(
            b"".join(
                encode_record(
                    field,
                    body,
                    # What the messages above carry: a tag and the client's unique key.
                    encode_properties({Property.TAGS: "TagA", Property.UNIQ_KEY: new_message_id()}),
                    born,
                )
                for _ in range(batch)
            )
        )
    return runs


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise RuntimeError("the dispatcher did not catch up within the time limit")
        time.sleep(0.001)


async def measure(store: MessageStore, handoff: str, batch: int, count: int) -> tuple[float, float]:
    """(process CPU µs, appending thread CPU µs) per message for ``count`` messages."""
    calls = max(1, count // batch)
    ready: list[PreparedRecords] = []
    if handoff == "messages":
        pool = messages_pool()
        batches = [
            pool[(i * batch) % POOL : (i * batch) % POOL + batch] for i in range(POOL // batch)
        ]

        async def put(i: int) -> None:
            result = await store.put_messages_async(batches[i % len(batches)])
            if not result.ok:
                raise RuntimeError(f"put failed: {result.status} {result.reason}")

    else:
        runs = encoded_runs(batch)
        config = store.config

        def prepared(i: int) -> PreparedRecords:
            return prepare_records(
                runs[i % len(runs)],
                TOPIC,
                i % QUEUES,
                born_host=bytes(8),
                store_host=bytes(8),
                max_message_size=config.max_message_size,
                born_default=1,
            )

        # "prepared": checked and filled in before the clock starts, as fronts would.
        if handoff == "prepared":
            ready = [prepared(i) for i in range(calls)]

        async def put(i: int) -> None:
            batch_ = ready[i] if ready else prepared(i)
            result = await store.put_records_async(batch_)
            if not result.ok:
                raise RuntimeError(f"put failed: {result.status} {result.reason}")

    for i in range(min(64, calls)):  # warm-up: code paths, the first segment's pages
        await put(calls - 1 - i if ready else i)
    wait_for(lambda: store.dispatcher.reput_offset >= store.commit_log.queue.max_wrote_offset, 60)
    process0, thread0 = time.process_time(), time.thread_time()
    for i in range(calls - min(64, calls) if ready else calls):
        await put(i)
    end = store.commit_log.queue.max_wrote_offset
    thread1 = time.thread_time()
    wait_for(lambda: store.dispatcher.reput_offset >= end, 60)
    process1 = time.process_time()
    messages = (calls - min(64, calls) if ready else calls) * batch
    return (process1 - process0) / messages * 1e6, (thread1 - thread0) / messages * 1e6


def _send_runs(sock: socket.socket, run: bytes, frames: int) -> None:
    """The front's side (a child process): ``frames`` length-prefixed runs, as fast as read."""
    frame = struct.pack(">I", len(run)) + run
    with sock:
        for _ in range(frames):
            sock.sendall(frame)


async def receive_runs(batch: int, count: int) -> float:
    """Process CPU µs per message of reading runs of ``batch`` records off a Unix socket
    (uvloop streams), what a store process pays for the hand-off itself."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    run = encoded_runs(batch)[0]
    frames = max(1, count // batch)
    front = multiprocessing.get_context("fork").Process(
        target=_send_runs, args=(theirs, run, frames)
    )
    front.start()
    theirs.close()
    reader, writer = await asyncio.open_unix_connection(sock=ours)
    cpu0 = time.process_time()
    for _ in range(frames):
        (length,) = struct.unpack(">I", await reader.readexactly(4))
        await reader.readexactly(length)
    cpu = time.process_time() - cpu0
    writer.close()
    front.join()
    return cpu / (frames * batch) * 1e6


def speedup(serial: float, cores: int) -> float:
    return 1 / (serial + (1 - serial) / cores)


def one_shape(handoff: str, batch: int, args: argparse.Namespace) -> tuple[float, float]:
    root = tempfile.mkdtemp(prefix="skiff-writer-share-", dir=args.data_dir)
    store = MessageStore(
        StoreConfig(
            data_dir=root,
            flush_type=FlushType.ASYNC_FLUSH,
            commit_log_file_size=256 * MiB,
            max_message_size=4 * MiB,
        )
    )
    store.start()
    try:
        # On uvloop, as the broker runs.
        return uvloop.run(measure(store, handoff, batch, args.messages))
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=60_000)
    parser.add_argument("--batches", default="1,16,64")
    parser.add_argument("--rounds", type=int, default=3, help="medians are printed")
    parser.add_argument("--front-us", type=float, default=0.0)
    parser.add_argument("--data-dir", default=".")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",") if b]
    print(f"load average before: {os.getloadavg()}")
    shapes = [(h, b) for h in ("messages", "records", "prepared") for b in batches]
    process: dict[tuple[str, int], list[float]] = {shape: [] for shape in shapes}
    thread: dict[tuple[str, int], list[float]] = {shape: [] for shape in shapes}
    handoff_us: dict[int, list[float]] = {batch: [] for batch in batches}
    for round_ in range(args.rounds):
        # Alternating the order: drift on the machine hits every shape.
        for shape in shapes if round_ % 2 == 0 else list(reversed(shapes)):
            process_us, thread_us = one_shape(*shape, args)
            process[shape].append(process_us)
            thread[shape].append(thread_us)
            print(f"  round {round_ + 1} {shape[0]:<9} {shape[1]:>3}: {process_us:.1f}", flush=True)
        for batch in batches:
            handoff_us[batch].append(uvloop.run(receive_runs(batch, args.messages)))
    median = statistics.median
    print(f"\nmedians of {args.rounds} round(s), CPU µs per message")
    print(f"{'hand-off':<9} {'batch':>5} {'process':>8} {'appending thread':>17}")
    for shape in shapes:
        print(
            f"{shape[0]:<9} {shape[1]:>5} {median(process[shape]):>8.1f}"
            f" {median(thread[shape]):>17.1f}"
        )
    for batch in batches:
        print(f"{'socket':<9} {batch:>5} {median(handoff_us[batch]):>8.1f}   (off a Unix socket)")
    if args.front_us > 0:
        print(f"\nprojection with the front door's {args.front_us:g} µs/msg outside the store:")
        print(f"{'hand-off':<9} {'batch':>5} {'serial s':>9} {'4 cores':>8} {'8':>6} {'16':>6}")
        for shape in shapes:
            writer = median(process[shape]) + median(handoff_us[shape[1]])
            serial = writer / (writer + args.front_us)
            print(
                f"{shape[0]:<9} {shape[1]:>5} {serial:>9.3f} {speedup(serial, 4):>7.2f}x"
                f" {speedup(serial, 8):>5.2f}x {speedup(serial, 16):>5.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
