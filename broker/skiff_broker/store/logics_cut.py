"""Bringing consume queues and index back in line after the commit log was cut.

Used by crash recovery, offline repair and a replica's truncation. Invariants, once
:func:`cut_logics` returns: no consume-queue unit and no index entry points at or past
the cut; every record below it from the re-dispatch point on has been dispatched again;
units found to disagree with the log (when checked) were blanked first, then rewritten
by the re-dispatch that met their records, and those whose record is gone or damaged
stay holes readers step over; the log's next queue offsets follow the queues.
"""

from __future__ import annotations

import logging

from .commit_log import CommitLog
from .consume_queue_table import ConsumeQueueTable
from .damage_report import DamageReport
from .dispatcher import Dispatcher
from .index_service import IndexService
from .queue_check import QueueCheck, unit_soundness
from .queue_check import check_queues as check_queues_against_log
from .recovery import Damage

log = logging.getLogger(__name__)


def cut_logics(
    commit_log: CommitLog,
    consume_queues: ConsumeQueueTable,
    index: IndexService | None,
    dispatcher: Dispatcher,
    damage_report: DamageReport,
    end: int,
    redispatch_from: int,
    *,
    check_queues: bool = False,
    check_crc: bool,
    full_check: bool = False,
    found_by: str = "recovery",
    skipped: list[Damage] | None = None,
) -> QueueCheck | None:
    """After the commit log was cut at ``end``: cut queues and index, re-dispatch the rest.

    With ``check_queues`` (after a crash), units that disagree with the log are
    first made blank, then rewritten by the re-dispatch that meets their
    records; those whose record is gone or damaged stay holes readers step over.
    Returns what the check found (None without it).
    """
    reput = max(redispatch_from, commit_log.min_offset)
    skipped = skipped or []
    checked = None
    if check_queues:
        checked = check_queues_against_log(
            commit_log.queue,
            consume_queues,
            end=end,
            full_from=0 if full_check else None,
            check_crc=check_crc,
            skipped=skipped,
            quick_from=0 if full_check else redispatch_from,
        )
        for (topic, queue_id), units in checked.bad.items():
            cq = consume_queues.get(topic, queue_id)
            assert cq is not None
            for queue_offset in units:
                cq.blank_unit(queue_offset)
            cq.refresh_max_physical_offset()
        dispatcher.repair_units = {key: set(units) for key, units in checked.bad.items()}
        if checked.restart is not None:
            reput = max(min(reput, checked.restart), commit_log.min_offset)
    for cq in consume_queues:
        cq.truncate_dirty(end)
    if index is not None:
        index.truncate(end)
        # Truncation drops whole index files: rebuild from where the index now ends.
        files = index.files
        reput = min(reput, files[-1].end_phy_offset if files else 0)
        if index.rebuild_from is not None:
            # Records whose entries no chain reaches are indexed again as they are met.
            reput = min(reput, index.rebuild_from)
        reput = max(reput, commit_log.min_offset)
    dispatcher.reput_offset = reput
    if check_queues:
        dispatcher.unit_is_sound = unit_soundness(commit_log.queue, end, skipped)
        dispatcher.verified_from, dispatcher.verified_below = redispatch_from, end
    try:
        dispatcher.dispatch_available()
    finally:
        dispatcher.unit_is_sound = None
        dispatcher.verified_from = dispatcher.verified_below = 0
    if index is not None:
        index.end_rebuild()
    if checked is not None and checked.bad:
        _report_queue_repairs(dispatcher, damage_report, checked, found_by)
    min_offset = commit_log.min_offset
    for cq in consume_queues:
        cq.correct_min_offset(min_offset)
    commit_log.queue_offsets = consume_queues.next_offsets()
    return checked


def _report_queue_repairs(
    dispatcher: Dispatcher, damage_report: DamageReport, checked: QueueCheck, found_by: str
) -> None:
    """Log and record each queue's repair: units rebuilt, and holes left."""
    holes = dispatcher.repair_units
    dispatcher.repair_units = {}
    for key, units in checked.bad.items():
        left = len(holes.get(key, ()))
        log.warning(
            "consume queue %s/%d: %d unit(s) disagreed with the commit log (first: %s); "
            "%d rebuilt from the log, %d left as holes readers step over (their records "
            "are damaged or gone)",
            key[0],
            key[1],
            len(units),
            checked.reasons.get(key, ""),
            len(units) - left,
            left,
        )
        reason = checked.reasons.get(key, "")
        damage_report.record_queue_repair(
            key[0], key[1], len(units), len(units) - left, reason, found_by
        )
