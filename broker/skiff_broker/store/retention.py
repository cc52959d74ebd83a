"""Deleting old data, and refusing writes when the disk is nearly full.

Like RocketMQ's clean services: segments older than ``file_reserved_time`` go
at the ``delete_when`` hour; past ``disk_max_used_space_ratio`` they go at any
hour; past ``disk_space_clean_forcibly_ratio`` the oldest go whatever their
age, if ``clean_file_forcibly_enable`` (RocketMQ's ``cleanFileForciblyEnable``,
on by default); past ``disk_space_warning_level_ratio`` writes are refused until
cleaning (or the operator) brings use back under it. Consume-queue and index
files follow the commit log's minimum offset.

Deleting segments before their time may delete messages no consumer has read:
the store logs that as a WARNING with counts per topic. With forcible cleaning
off nothing unexpired is deleted, and a full disk refuses writes instead.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable

from .config import StoreConfig
from .service_thread import ServiceThread

log = logging.getLogger(__name__)


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


class RetentionService(ServiceThread):
    name = "retention"

    def __init__(
        self,
        config: StoreConfig,
        *,
        delete_commit_log: Callable[[bool], int],
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
        # days: clean regardless of age even if the forcible ratio is set higher,
        # unless the operator chose to keep unexpired messages over accepting writes.
        clean_immediately = config.clean_file_forcibly_enable and (
            state.full or state.ratio > config.disk_space_clean_forcibly_ratio
        )
        space_to_delete = state.ratio > config.disk_max_used_space_ratio / 100
        hour = time.localtime(self._clock()).tm_hour
        if (
            is_delete_hour(config.delete_when, hour)
            or space_to_delete
            or clean_immediately
            or self.manual_delete
        ):
            self.manual_delete = False
            deleted = self._delete_commit_log(clean_immediately)
            if deleted:
                log.info(
                    "deleted %d commit-log segments (disk %.0f%% used%s)",
                    deleted,
                    state.ratio * 100,
                    ", cleaning regardless of age" if clean_immediately else "",
                )
                self.check_disk()
        self._delete_logic_files()
