"""Deleting old data, and refusing writes when the disk is nearly full.

Like RocketMQ's clean services: segments older than ``file_reserved_time`` go
at the ``delete_when`` hour; past ``disk_max_used_space_ratio`` they go at any
hour; past ``disk_space_warning_level_ratio`` writes are refused (DISK_FULL)
until cleaning (or the operator) brings use back under it. Consume-queue and
index files follow the commit log's minimum offset.

Past ``disk_space_clean_forcibly_ratio`` (or once writes are refused) the oldest
segments go before their time, but by default only those every reader is done
with: a segment goes when every group that consumes a topic in it has consumed
all of that topic's messages in it. A queue no group has read keeps its
segments until they expire. Invariant: by default nothing acknowledged that a
group has not consumed is deleted before ``file_reserved_time``.

``clean_file_forcibly_enable`` (RocketMQ's ``cleanFileForciblyEnable``, on by
default there, off here) deletes the oldest segments consumed or not; the store
logs what that took from readers as a WARNING with counts per topic.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable

from .config import StoreConfig
from .consume_queue import ConsumeQueue
from .service_thread import ServiceThread

log = logging.getLogger(__name__)

# Consume-queue units read at a time when counting what a deletion took.
_SCAN_UNITS = 4096

# Committed offset per consumer group of a (topic, queue id).
ConsumerProgress = Callable[[str, int], dict[str, int]]


def disk_use_ratio(path: str) -> float:
    """Used share of the file system holding ``path``, as ``df`` reports it.

    Blocks reserved for root count neither as used nor as available: counting them
    as used would call a file system with a large reserve full while it still has
    plenty of room for this process.
    """
    st = os.statvfs(path)
    used = st.f_blocks - st.f_bfree
    reachable = used + st.f_bavail
    if reachable <= 0:
        return 0.0
    return used / reachable


def is_delete_hour(delete_when: str, hour: int) -> bool:
    """``delete_when`` is RocketMQ's form: hours joined by ';', e.g. ``"04"`` or ``"04;16"``.

    Parts that are not plain ASCII numbers are ignored.
    """
    for part in delete_when.split(";"):
        part = part.strip()
        # isdigit() alone accepts characters int() rejects (e.g. superscripts).
        if part.isascii() and part.isdigit() and int(part) == hour:
            return True
    return False


@dataclasses.dataclass(slots=True)
class DiskState:
    ratio: float = 0.0
    full: bool = False


class EarlyDeletion(enum.Enum):
    """What may go before its time when the disk is nearly full."""

    NONE = "none"
    CONSUMED = "consumed"  # segments every consuming group is done with
    FORCIBLY = "forcibly"  # the oldest, consumed or not


class RetentionService(ServiceThread):
    name = "retention"

    def __init__(
        self,
        config: StoreConfig,
        *,
        delete_commit_log: Callable[[EarlyDeletion], int],
        delete_logic_files: Callable[[], None],
        on_disk_state: Callable[[DiskState], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(config.clean_resource_interval)
        self._config = config
        self._delete_commit_log = delete_commit_log
        self._delete_logic_files = delete_logic_files
        self._on_disk_state = on_disk_state
        self._clock = clock
        self.manual_delete = False

    def check_disk(self) -> DiskState:
        ratio = disk_use_ratio(self._config.data_dir)
        state = DiskState(ratio, ratio > self._config.disk_space_warning_level_ratio)
        self._on_disk_state(state)
        return state

    def step(self) -> None:
        state = self.check_disk()
        config = self._config
        # Once writes are refused, waiting for files to age would refuse them for
        # days: delete early even if the forcible ratio is set higher. What may go
        # early is what every reader is done with, unless the operator chose to
        # accept writes over keeping unconsumed messages.
        pressed = state.full or state.ratio > config.disk_space_clean_forcibly_ratio
        early = EarlyDeletion.NONE
        if pressed:
            early = (
                EarlyDeletion.FORCIBLY
                if config.clean_file_forcibly_enable
                else EarlyDeletion.CONSUMED
            )
        space_to_delete = state.ratio > config.disk_max_used_space_ratio / 100
        hour = time.localtime(self._clock()).tm_hour
        if (
            is_delete_hour(config.delete_when, hour)
            or space_to_delete
            or pressed
            or self.manual_delete
        ):
            self.manual_delete = False
            deleted = self._delete_commit_log(early)
            if deleted:
                log.info(
                    "deleted %d commit-log segments (disk %.0f%% used%s)",
                    deleted,
                    state.ratio * 100,
                    _EARLY_NOTES[early],
                )
                self.check_disk()
        self._delete_logic_files()


_EARLY_NOTES = {
    EarlyDeletion.NONE: "",
    EarlyDeletion.CONSUMED: ", early where every consuming group had read them",
    EarlyDeletion.FORCIBLY: ", cleaning regardless of age",
}


# -- what consumers are done with ---------------------------------------------


def consumed_below(queues: Iterable[ConsumeQueue], progress: ConsumerProgress | None) -> int:
    """The commit-log offset below which every record some queue points at is consumed.

    A queue's records count as consumed up to the lowest committed offset of the
    groups that consume its topic; a queue no group consumes has consumed nothing
    (its first record bounds the result). Records of no queue do not bound it. The
    result is ``sys.maxsize`` when every queue is read to its end.
    """
    bound = sys.maxsize
    for cq in queues:
        first, end = cq.min_offset, cq.max_offset
        if end <= first:
            continue
        groups = _groups_of(progress, cq.topic, cq.queue_id)
        # -1: a group of the topic that never committed on this queue read none of it.
        read_to = max(first, min(groups.values())) if groups else first
        if read_to >= end:
            continue
        physical = _physical_at_or_after(cq, read_to)
        if physical is not None:
            bound = min(bound, physical)
    return bound


def _physical_at_or_after(cq: ConsumeQueue, queue_offset: int) -> int | None:
    """The commit-log offset of the first unit from ``queue_offset`` on, None if none."""
    end = cq.max_offset
    while queue_offset < end:
        units = cq.read_units(queue_offset, 1)
        if units:
            return units[0][0]
        queue_offset += 1  # a blank unit
    return None


# -- what deleting before their time took ------------------------------------


@dataclasses.dataclass(slots=True)
class Unread:
    """Messages of one topic a deletion took before every group had read them."""

    messages: int = 0
    bytes: int = 0
    groups: set[str] = dataclasses.field(default_factory=set)


def unread_below(
    queues: Iterable[ConsumeQueue], physical_end: int, progress: ConsumerProgress | None
) -> dict[str, Unread]:
    """Per topic, the messages of ``queues`` whose records lie below ``physical_end``.

    Call after deleting the commit log below ``physical_end`` and before the
    queues' own files follow (their minimum offset still names the first message
    that was there). With ``progress``, only messages some group had not consumed
    count, and those groups are named; without, every such message counts.
    """
    by_topic: dict[str, Unread] = {}
    for cq in queues:
        first = cq.min_offset
        end = _first_unit_at_or_past(cq, physical_end)
        if end <= first:
            continue
        groups = _groups_of(progress, cq.topic, cq.queue_id)
        behind = {group: offset for group, offset in groups.items() if offset < end}
        if groups and not behind:
            continue  # every group had read them all
        unread_from = max(first, min(behind.values(), default=first))
        unread = by_topic.setdefault(cq.topic, Unread())
        unread.messages += end - unread_from
        unread.bytes += _bytes_between(cq, unread_from, end)
        unread.groups.update(behind)
    return by_topic


def warn_deleted_unread(old_min: int, new_min: int, by_topic: dict[str, Unread]) -> None:
    """One WARNING for a deletion regardless of age, with counts per topic (if any)."""
    if not by_topic:
        return
    summary = {
        topic: {"messages": u.messages, "bytes": u.bytes, "unread_by": sorted(u.groups)}
        for topic, u in sorted(by_topic.items())
    }
    described = ", ".join(
        f"{topic}: {u.messages} messages, {u.bytes} bytes"
        + (f", unread by {', '.join(sorted(u.groups))}" if u.groups else "")
        for topic, u in sorted(by_topic.items())
    )
    log.warning(
        "disk nearly full: deleted commit log %d..%d regardless of age, with %d messages "
        "not yet consumed (%s), because clean_file_forcibly_enable is on; turn it off "
        "(skiff broker --no-clean-file-forcibly, the default) to refuse writes instead, "
        "or give the data directory a larger disk",
        old_min,
        new_min,
        sum(u.messages for u in by_topic.values()),
        described,
        extra={"deleted_unconsumed": summary},
    )


def _groups_of(progress: ConsumerProgress | None, topic: str, queue_id: int) -> dict[str, int]:
    if progress is None:
        return {}
    try:
        return progress(topic, queue_id)
    except Exception:  # the warning goes out without groups rather than not at all
        log.exception("could not read consumer offsets of %s/%d", topic, queue_id)
        return {}


def _first_unit_at_or_past(cq: ConsumeQueue, physical_end: int) -> int:
    """The first queue offset from ``cq.min_offset`` whose record starts at or past
    ``physical_end`` (units are in log order within a queue)."""
    offset = cq.min_offset
    end = cq.max_offset
    while offset < end:
        units = cq.read_units(offset, _SCAN_UNITS)
        if not units:
            offset += 1  # a blank unit, or a file deleted meanwhile
            continue
        for physical, _, _ in units:
            if physical >= physical_end:
                return offset
            offset += 1
    return offset


def _bytes_between(cq: ConsumeQueue, start: int, end: int) -> int:
    size = 0
    offset = start
    while offset < end:
        units = cq.read_units(offset, min(_SCAN_UNITS, end - offset))
        if not units:
            offset += 1
            continue
        size += sum(unit_size for _, unit_size, _ in units)
        offset += len(units)
    return size
