"""Questions about the store as a whole: messages by key, and a sample of its positions.

Invariants: a key query returns only messages whose topic and KEYS (or unique ID)
really match, whatever the index's hash collisions; a stats sample reads the log's
positions in the order they trail each other, so flushed <= committed <= wrote holds
even while appends run.
"""

from __future__ import annotations

from .commit_log import CommitLog
from .config import StoreConfig
from .dispatcher import Dispatcher
from .index_service import IndexService
from .message import StoredMessage
from .reading import read_message
from .results import PutResult, StoreStats
from .retention import disk_use_ratio


def query_by_key(
    config: StoreConfig,
    commit_log: CommitLog,
    index: IndexService | None,
    topic: str,
    key: str,
    max_num: int,
    begin_ms: int,
    end_ms: int,
) -> list[StoredMessage]:
    """Messages of ``topic`` whose KEYS or unique ID equal ``key`` (newest first)."""
    if index is None:
        return []
    found = []
    seen = set()
    for physical in index.query(topic, key, max_num * 2, begin_ms, end_ms):
        if physical in seen:
            continue
        seen.add(physical)
        message = _read_unsized(config, commit_log, physical)
        if (
            message is not None
            and message.topic == topic
            and (key in message.keys or message.unique_id == key)
        ):
            found.append(message)
            if len(found) >= max_num:
                break
    return found


def _read_unsized(
    config: StoreConfig, commit_log: CommitLog, physical: int
) -> StoredMessage | None:
    head = commit_log.read(physical, 4)
    if head is None:
        return None
    size = int.from_bytes(head, "big", signed=True)
    if size <= 0 or size > config.max_message_size + 64 * 1024:
        return None
    return read_message(commit_log, physical, size)


def sample_stats(
    config: StoreConfig, commit_log: CommitLog, dispatcher: Dispatcher, refusal: PutResult | None
) -> StoreStats:
    """The store's positions now; ``refusal`` is why writes are refused, None if they are not."""
    queue = commit_log.queue
    # Read in the order the positions trail each other, so that a sample taken
    # while appends run still shows flushed <= committed <= wrote.
    flushed = queue.flushed_where
    committed = queue.max_offset
    wrote = queue.max_wrote_offset
    return StoreStats(
        commit_log_min_offset=commit_log.min_offset,
        commit_log_max_offset=committed,
        wrote_offset=wrote,
        committed_offset=committed,
        flushed_offset=flushed,
        dispatched_offset=dispatcher.reput_offset,
        fsync_count=queue.flush_count,
        disk_use_ratio=disk_use_ratio(config.data_dir),
        writable=refusal is None,
        refusal=refusal.reason if refusal is not None else "",
    )
