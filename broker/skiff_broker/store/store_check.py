"""Checking a stopped data directory: what ``skiff store check`` reports and ``--repair`` fixes.

The check only reads: it scans every commit-log record with the same decision
as recovery (what would be skipped, where a torn tail would be cut), checks
every consume-queue unit in full against the log, and reads the damage report.
Damage already in the report was handled by an earlier recovery or repair; only
new damage, a torn tail or bad units make the check fail. Segment and
consume-queue file sizes are read from the files themselves, so a store made
with any segment size can be checked without options.

A directory a running broker holds (its ``lock``) can be checked too, and the outcome
says so (``live``): the broker appends, flushes and dispatches meanwhile, so the tail,
the newest consume-queue units and the report may change while they are read.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..wire.message_size import ROCKETMQ_MAX_MESSAGE_SIZE
from .config import ROCKETMQ_CONSUME_QUEUE_FILE_ENTRIES, StoreConfig
from .consume_queue_table import ConsumeQueueTable
from .damage_report import DamageReport
from .errors import StoreError
from .file_sizes import commit_log_segment_size, consume_queue_units_per_file
from .mapped_file_queue import MappedFileQueue
from .message_store import MessageStore, data_dir_in_use
from .queue_check import check_queues
from .recovery import scan_from


def segment_size(data_dir: str, given: int | None = None) -> int:
    """The commit-log segment size, read from the segments (``given`` must agree)."""
    directory = os.path.join(data_dir, "commitlog")
    found = commit_log_segment_size(data_dir)
    if found is None:
        if given is None:
            raise StoreError(f"{directory} holds no commit-log segment: nothing to check")
        return given
    if given is not None and given != found:
        raise StoreError(
            f"--commit-log-file-size is {given} but the segments in {directory} are {found} "
            "bytes; leave the option out and the size is read from the files"
        )
    return found


def config_for(data_dir: str, commit_log_file_size: int | None = None) -> StoreConfig:
    """A store config that opens ``data_dir`` as its files were made."""
    size = segment_size(data_dir, commit_log_file_size)
    config = StoreConfig(
        data_dir=data_dir,
        commit_log_file_size=size,
        consume_queue_units_per_file=consume_queue_units_per_file(data_dir)
        or ROCKETMQ_CONSUME_QUEUE_FILE_ENTRIES,
        max_message_size=min(ROCKETMQ_MAX_MESSAGE_SIZE, size - 2048),
        # The index files' settings are not recorded in them: it is left as it is
        # (a look-up drops an entry that points at no matching record).
        message_index_enable=False,
        warm_mapped_files=False,
    )
    config.validate()
    return config


@dataclasses.dataclass
class CheckOutcome:
    segments: int
    segment_size: int
    records: int
    valid_end: int
    problem: str | None  # a torn tail: where valid data ends before the log does
    damaged: list[dict[str, Any]]
    new_damage: int
    units_checked: int
    bad_units: dict[str, int]
    report: list[dict[str, Any]]
    # A broker held the directory while it was checked: its newest bytes were in flux.
    live: bool = False

    @property
    def ok(self) -> bool:
        return not self.problem and not self.new_damage and not self.bad_units

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def check(data_dir: str, commit_log_file_size: int | None = None) -> CheckOutcome:
    live = data_dir_in_use(data_dir)
    config = config_for(data_dir, commit_log_file_size)
    queue = MappedFileQueue(config.commit_log_dir, config.commit_log_file_size)
    table = ConsumeQueueTable(config.consume_queue_dir, config.consume_queue_units_per_file)
    queue.load()
    try:
        result = scan_from(queue, 0, check_crc=True)
        table.load()
        checked = check_queues(
            queue, table, end=result.end, full_from=0, check_crc=True, skipped=result.damages
        )
        segments = len(queue.files)
    finally:
        table.close()
        queue.close()
    report = DamageReport(data_dir)
    known = report.known_skips()
    damaged = [
        {**dataclasses.asdict(d), "known": (d.offset, d.length) in known} for d in result.damages
    ]
    return CheckOutcome(
        segments=segments,
        segment_size=config.commit_log_file_size,
        records=result.records,
        valid_end=result.end,
        problem=result.problem,
        damaged=damaged,
        new_damage=sum(1 for d in damaged if not d["known"]),
        units_checked=checked.checked,
        bad_units={f"{t}/{q}": len(units) for (t, q), units in checked.bad.items()},
        report=report.entries(),
        live=live,
    )


@dataclasses.dataclass
class RepairOutcome:
    end: int
    cut: bool
    skipped: list[dict[str, Any]]
    units_bad: int
    units_rebuilt: int
    index_left_to_next_start: bool

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def repair(data_dir: str, commit_log_file_size: int | None = None) -> RepairOutcome:
    """Recover a stopped data directory offline (StoreError while a broker holds it)."""
    config = config_for(data_dir, commit_log_file_size)
    store = MessageStore(config)
    before = DamageReport(data_dir).entries()
    store.repair()
    recovered = store.last_recovery
    assert recovered is not None
    added = DamageReport(data_dir).entries()[len(before) :]
    rebuilt = sum(e["rebuilt"] for e in added if e.get("kind") == "consume-queue")
    bad = sum(e["bad_units"] for e in added if e.get("kind") == "consume-queue")
    return RepairOutcome(
        end=recovered.end,
        cut=store.log_was_cut,
        skipped=[dataclasses.asdict(d) for d in recovered.damages],
        units_bad=bad,
        units_rebuilt=rebuilt,
        index_left_to_next_start=store.log_was_cut,
    )
