"""Typed settings of the message store, named after RocketMQ's MessageStoreConfig.

The defaults are `skiff broker`'s: the fields users set are declared with their option and
``SKIFF_*`` variable (wire/setting.py), and the file sizes are a laptop's; RocketMQ's
production sizes (wire/store_sizes.py) are what the operator sets.
"""

from __future__ import annotations

import dataclasses
import enum
import grp
import os

from ..wire.message_size import MAX_MESSAGE_SIZE_OPTION, ROCKETMQ_MAX_MESSAGE_SIZE
from ..wire.setting import declared_field, option
from ..wire.store_sizes import ROCKETMQ_CONSUME_QUEUE_FILE_ENTRIES


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

    data_dir: str = option(
        "./skiff-data",
        "--data-dir",
        "SKIFF_DATA_DIR",
        "Where the commit log, queues, index and config live.",
        kind="directory",
    )
    # Files stay 0600 either way: messages and users' secrets are the broker's alone.
    data_dir_group: str = option(
        "",
        "--data-dir-group",
        "SKIFF_DATA_DIR_GROUP",
        "A group (name or number) that may list the data directory: its directories become "
        "2750 and that group's (the broker's user must be a member); its files stay 0600. "
        "Default: directories 0700.",
    )
    flush_type: FlushType = option(
        FlushType.ASYNC_FLUSH,
        "--flush-type",
        "SKIFF_FLUSH_TYPE",
        "SYNC_FLUSH acknowledges a write once it is on disk (group commit).",
        exact_case=True,
    )

    # Segment sizes.
    commit_log_file_size: int = option(
        LAPTOP_COMMIT_LOG_FILE_SIZE,
        "--commit-log-file-size",
        "SKIFF_COMMIT_LOG_FILE_SIZE",
        "Size of each pre-allocated commit-log segment (RocketMQ's mappedFileSizeCommitLog; "
        "its production size, 1g, is what the operator sets). A store keeps the size it was "
        "made with.",
        kind="size",
    )
    consume_queue_units_per_file: int = option(
        ROCKETMQ_CONSUME_QUEUE_FILE_ENTRIES,
        "--consume-queue-file-entries",
        "SKIFF_CONSUME_QUEUE_FILE_ENTRIES",
        "Entries (20 bytes each) in each consume-queue file, made per queue on its first "
        "message (RocketMQ's mappedFileSizeConsumeQueue / 20).",
        minimum=1,
    )
    max_message_size: int = declared_field(ROCKETMQ_MAX_MESSAGE_SIZE, MAX_MESSAGE_SIZE_OPTION)
    # Units one filtered read may scan before answering with what it found.
    max_filter_message_count: int = 16_000

    # SYNC_FLUSH: a waiter gets FLUSH_DISK_TIMEOUT past this.
    sync_flush_timeout: float = option(
        5.0,
        "--sync-flush-timeout",
        "SKIFF_SYNC_FLUSH_TIMEOUT",
        "Seconds a SYNC_FLUSH write waits for the disk before FLUSH_DISK_TIMEOUT.",
    )
    # ASYNC_FLUSH.
    flush_interval_commit_log: float = 0.5
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: float = 10.0
    # Transient store pool (ASYNC_FLUSH only, as in RocketMQ).
    transient_store_pool_enable: bool = option(
        False,
        "--transient-store-pool",
        "SKIFF_TRANSIENT_STORE_POOL",
        "Append into memory buffers committed to the file in the background (ASYNC_FLUSH).",
    )
    transient_store_pool_size: int = 5
    commit_interval_commit_log: float = 0.2
    commit_commit_log_least_pages: int = 4
    commit_commit_log_thorough_interval: float = 0.2
    # Consume queue and index flushing.
    flush_interval_consume_queue: float = 1.0
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: float = 60.0

    # Whether a segment is written with zeros (and synced) when prepared, so that later
    # appends overwrite written blocks and a flush writes data only: no block
    # allocation or extent conversion inside the wait of a SYNC_FLUSH append. None: only
    # under SYNC_FLUSH. Under ASYNC_FLUSH nobody waits for the flush, and the zeros cost
    # a segment's worth of writing and syncing at every roll (RocketMQ does not warm
    # by default either).
    warm_mapped_files: bool | None = None

    # IndexFile.
    message_index_enable: bool = True
    # 0: RocketMQ's proportion, a hash slot for every four keys (made so on construction).
    max_hash_slot_num: int = option(
        0,
        "--index-hash-slots",
        "SKIFF_INDEX_HASH_SLOTS",
        "Hash slots (4 bytes each) in each index file (RocketMQ's maxHashSlotNum).",
        minimum=0,
        shown_default="a quarter of --index-file-entries",
    )
    max_index_num: int = option(
        LAPTOP_INDEX_FILE_ENTRIES,
        "--index-file-entries",
        "SKIFF_INDEX_FILE_ENTRIES",
        "Keys in each pre-allocated index file, 20 bytes each (RocketMQ's maxIndexNum; its "
        "production size, 20000000, is what the operator sets).",
        minimum=4,
    )

    # Retention and disk space.
    file_reserved_time_hours: float = option(
        72.0,
        "--file-reserved-hours",
        "SKIFF_FILE_RESERVED_HOURS",
        "Delete commit-log segments older than this.",
    )
    delete_when: str = option(
        "04",
        "--delete-when",
        "SKIFF_DELETE_WHEN",
        "Hours at which old segments are deleted, e.g. 04 or 04;16.",
    )
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: float = 0.85
    disk_space_warning_level_ratio: float = 0.90
    # RocketMQ's cleanFileForciblyEnable (on there, off here): past
    # disk_space_clean_forcibly_ratio (or once writes are refused) delete the oldest
    # segments whatever their age, consumed or not, with a WARNING counting them per
    # topic. Off: only segments every consuming group has read go early; the rest
    # are kept until they expire, and writes are refused (DISK_FULL) past the
    # warning ratio.
    clean_file_forcibly_enable: bool = option(
        False,
        "--clean-file-forcibly",
        "SKIFF_CLEAN_FILE_FORCIBLY",
        "When the disk passes 85% use, delete the oldest segments even if unexpired and "
        "unconsumed (logged per topic as a WARNING; RocketMQ's cleanFileForciblyEnable). "
        "Off (the default): only segments every consuming group has read go early, and "
        "writes are refused (DISK_FULL) past 90% until consumers catch up.",
    )
    clean_resource_interval: float = 10.0
    delete_commit_log_files_interval: float = 0.1
    delete_files_batch_max: int = 10

    # Recovery.
    check_crc_on_recover: bool = True

    # Address written into every record's STOREHOST field.
    store_host: str = "127.0.0.1:10911"

    def __post_init__(self) -> None:
        if not self.max_hash_slot_num:
            self.max_hash_slot_num = max(1, self.max_index_num // 4)

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
        gid = self.data_dir_gid
        if gid is not None and os.geteuid() != 0 and gid not in {os.getegid(), *os.getgroups()}:
            raise ValueError(
                f"--data-dir-group {self.data_dir_group}: this user is not a member of that "
                "group, so it cannot give the data directory to it; add the user to the group "
                "or name one of its groups"
            )

    @property
    def data_dir_gid(self) -> int | None:
        """The group of --data-dir-group; None: the directory is the user's alone."""
        name = self.data_dir_group.strip()
        if not name:
            return None
        try:
            return int(name) if name.isdigit() else grp.getgrnam(name).gr_gid
        except KeyError:
            raise ValueError(
                f"--data-dir-group {name}: no such group; name an existing group or its number"
            ) from None

    @property
    def warms_segments(self) -> bool:
        """Whether segments are warmed when prepared (``warm_mapped_files``)."""
        if self.warm_mapped_files is None:
            return self.flush_type is FlushType.SYNC_FLUSH
        return self.warm_mapped_files

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
