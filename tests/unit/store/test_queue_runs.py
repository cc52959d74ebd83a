"""A run of usual records is appended and dispatched as one run (``QueueRun``): the
commit log, consume queues and index it leaves are the record-by-record path's, byte
for byte, and a key lookup finds each message.

The same appends go into two stores, one with the Append door's numpy path turned
off; the store clock is fixed, so the bytes can be compared whole.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from skiff_broker.store import commit_log as commit_log_module
from skiff_broker.store import prepared_records as door
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.dispatch_request import QueueRun
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore
from skiff_broker.wire.properties import encode_properties, id_only_properties
from skiff_broker.wire.record_codec import encode_client_record, topic_field

RUN = door._RUN_MIN_RECORDS
NOW_MS = 1_750_000_000_123


def records(topic: str, first: int, count: int, *, tags: bool = False) -> bytes:
    """``count`` records as BatchingProducer encodes them (with a tag: not a usual run)."""
    return b"".join(
        encode_client_record(
            topic_field(topic),
            f"body {n} ".encode() * (1 + n % 7),
            encode_properties({"UNIQ_KEY": f"ID{n:08d}", "TAGS": "TagA"})
            if tags
            else id_only_properties(f"ID{n:08d}"),
            NOW_MS - 5,
        )
        for n in range(first, first + count)
    )


# (topic, queue, records): runs, short appends and a tagged run, over two topics and
# queues, enough to roll 64 KiB segments and cross index and consume-queue files.
APPENDS = [
    ("orders", 0, records("orders", 0, RUN + 12)),
    ("orders", 0, records("orders", 1000, 3)),
    ("orders", 1, records("orders", 2000, 2 * RUN)),
    ("orders", 0, records("orders", 3000, RUN, tags=True)),
    ("orders", 0, records("orders", 4000, RUN)),
    ("events", 0, records("events", 5000, 3 * RUN)),
    ("orders", 1, records("orders", 6000, RUN + 1)),
]


async def fill(store: MessageStore) -> list[int]:
    """Append APPENDS (a SendMessage-style batch among them); the runs' first offsets."""
    runs = []
    for n, (topic, queue_id, data) in enumerate(APPENDS):
        batch = door.prepare_records(
            data,
            topic,
            queue_id,
            born_host=bytes(8),
            store_host=store.commit_log.store_host,
            max_message_size=store.config.max_message_size,
            born_default=NOW_MS,
        )
        if batch.run is not None:
            runs.append(n)
        result = await store.put_records_async(batch)
        assert result.ok, result.reason
        if n == 2:
            message = Message("orders", b"sent", 1, properties={"UNIQ_KEY": "SENT"})
            assert store.put_messages([message]).ok
    return runs


def store_files(root: Path) -> dict[str, bytes]:
    """The commit log and consume queues by path, the index files in order of name (their
    names are their creation times)."""
    files = {
        str(p.relative_to(root)): p.read_bytes()
        for part in ("commitlog", "consumequeue")
        for p in sorted((root / part).rglob("*"))
        if p.is_file()
    }
    for n, p in enumerate(sorted((root / "index").glob("*"))):
        files[f"index #{n}"] = p.read_bytes()
    return files


def test_runs_leave_the_bytes_the_record_by_record_path_leaves(
    tmp_path: Path,
    store_config: Callable[..., StoreConfig],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(commit_log_module, "time", types.SimpleNamespace(time=lambda: NOW_MS / 1e3))
    stores = {}
    for numpy_path in (True, False):
        monkeypatch.setattr(door, "_RUN_MIN_RECORDS", RUN if numpy_path else 10**9)
        config = store_config(data_dir=str(tmp_path / f"numpy-{numpy_path}"))
        with MessageStore(config) as store:
            runs = asyncio.run(fill(store))
            assert store.wait_dispatched()
            # Every run but the tagged one took the numpy path, when it was on.
            assert runs == ([0, 2, 4, 5, 6] if numpy_path else [])
            for topic, key in (
                ("orders", "ID00000000"),
                ("orders", "ID00006048"),
                ("events", "ID00005100"),
            ):
                found = store.query_by_key(topic, key)
                assert [m.properties["UNIQ_KEY"] for m in found] == [key]
            assert store.query_by_key("orders", "SENT")[0].body == b"sent"
        stores[numpy_path] = store_files(Path(config.data_dir))
    numpy_files, loop_files = stores[True], stores[False]
    assert sorted(numpy_files) == sorted(loop_files)
    assert len(loop_files) > 4
    for name, data in loop_files.items():
        assert numpy_files[name] == data, name


def test_a_run_that_does_not_continue_its_queue_is_dispatched_record_by_record(
    store_config: Callable[..., StoreConfig],
) -> None:
    """A run handed again (a replay) is held to the per-record rules: nothing doubles."""
    with MessageStore(store_config()) as store:
        handed: list[QueueRun] = []
        hand = store.commit_log.on_append

        def keep(batch: object) -> None:
            if isinstance(batch, QueueRun):
                handed.append(batch)
            hand(batch)  # type: ignore[arg-type]

        store.commit_log.on_append = keep
        asyncio.run(fill(store))
        assert store.wait_dispatched()
        queue = store.consume_queues.find_or_create("orders", 1)
        before = queue.max_offset
        store.dispatcher._dispatch_handed([handed[1]])
        assert queue.max_offset == before
        assert [m.properties["UNIQ_KEY"] for m in store.query_by_key("orders", "ID00002000")] == [
            "ID00002000"
        ]
