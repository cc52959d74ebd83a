"""Typed settings of the message store; defaults follow RocketMQ's MessageStoreConfig."""

from __future__ import annotations

import dataclasses
import enum
import os

from ..wire.store_sizes import (
    ROCKETMQ_COMMIT_LOG_FILE_SIZE,
    ROCKETMQ_CONSUME_QUEUE_FILE_ENTRIES,
    ROCKETMQ_INDEX_FILE_ENTRIES,
    ROCKETMQ_INDEX_HASH_SLOTS,
)


class FlushType(enum.StrEnum):
    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


GiB = 1024**3
MiB = 1024**2

# `skiff broker` without options is sized for a laptop: two 64 MiB segments (the one in
# use and the next one prepared) and a 21 MB index file, so a first start writes
# about 150 MB instead of 2.5 GB. Consume-queue files are made per queue on its first
# message, 6 MB each.
LAPTOP_COMMIT_LOG_FILE_SIZE = 64 * MiB
LAPTOP_INDEX_FILE_ENTRIES = 1_000_000


@dataclasses.dataclass(slots=True)
class StoreConfig:
    """Settings of one store. Durations are seconds; sizes are bytes."""

    data_dir: str
    flush_type: FlushType = FlushType.ASYNC_FLUSH

    # Segment sizes.
    commit_log_file_size: int = ROCKETMQ_COMMIT_LOG_FILE_SIZE
    consume_queue_units_per_file: int = ROCKETMQ_CONSUME_QUEUE_FILE_ENTRIES
    max_message_size: int = 4 * MiB
    # Units one filtered read may scan before answering with what it found.
    max_filter_message_count: int = 16_000

    # SYNC_FLUSH: a waiter gets FLUSH_DISK_TIMEOUT past this.
    sync_flush_timeout: float = 5.0
    # ASYNC_FLUSH.
    flush_interval_commit_log: float = 0.5
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: float = 10.0
    # Transient store pool (ASYNC_FLUSH only, as in RocketMQ).
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5
    commit_interval_commit_log: float = 0.2
    commit_commit_log_least_pages: int = 4
    commit_commit_log_thorough_interval: float = 0.2
    # Consume queue and index flushing.
    flush_interval_consume_queue: float = 1.0
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: float = 60.0

    # Segments are touched page by page when prepared so that the first append
    # into them does not take page faults.
    warm_mapped_files: bool = True

    # IndexFile.
    message_index_enable: bool = True
    max_hash_slot_num: int = ROCKETMQ_INDEX_HASH_SLOTS
    max_index_num: int = ROCKETMQ_INDEX_FILE_ENTRIES

    # Retention and disk space.
    file_reserved_time_hours: float = 72.0
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: float = 0.85
    disk_space_warning_level_ratio: float = 0.90
    # RocketMQ's cleanFileForciblyEnable: past disk_space_clean_forcibly_ratio (or
    # once writes are refused) delete the oldest segments whatever their age,
    # consumed or not, with a WARNING counting them per topic. Off: keep them
    # until they expire, and refuse writes (DISK_FULL) past the warning ratio.
    clean_file_forcibly_enable: bool = True
    clean_resource_interval: float = 10.0
    delete_commit_log_files_interval: float = 0.1
    delete_files_batch_max: int = 10

    # Recovery.
    check_crc_on_recover: bool = True

    # Address written into every record's STOREHOST field.
    store_host: str = "127.0.0.1:10911"

    def validate(self) -> None:
        """Raise ValueError with a sentence that says what to change."""
        if self.transient_store_pool_enable and self.flush_type is not FlushType.ASYNC_FLUSH:
            raise ValueError(
                "the transient store pool works only with ASYNC_FLUSH; "
                "disable it or set the flush type to ASYNC_FLUSH"
            )
        if self.commit_log_file_size < 64 * 1024:
            raise ValueError("commit_log_file_size must be at least 64 KiB")
        if self.max_message_size + 1024 > self.commit_log_file_size:
            raise ValueError(
                "max_message_size must leave room in a commit-log segment; "
                "raise commit_log_file_size or lower max_message_size"
            )
        if self.consume_queue_units_per_file < 1:
            raise ValueError("consume_queue_units_per_file must be positive")
        for name in ("disk_space_warning_level_ratio", "disk_space_clean_forcibly_ratio"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} is a fraction: set it between 0 and 1, e.g. 0.85")
        if not 1 <= self.disk_max_used_space_ratio <= 100:
            raise ValueError(
                "disk_max_used_space_ratio is a percentage: set it between 1 and 100, e.g. 75"
            )

    @property
    def commit_log_dir(self) -> str:
        return os.path.join(self.data_dir, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.data_dir, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.data_dir, "index")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.data_dir, "checkpoint")

    @property
    def abort_path(self) -> str:
        return os.path.join(self.data_dir, "abort")

    @property
    def config_dir(self) -> str:
        return os.path.join(self.data_dir, "config")
