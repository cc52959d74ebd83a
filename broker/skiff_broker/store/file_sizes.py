"""The file sizes a store was made with, read from its files.

A store's commit-log segments, consume-queue files and index files each have one
size, fixed when the store was made: offsets are computed from it. Options given at a
later start (or changed defaults) apply only to new stores; an existing store keeps
the sizes on disk, and ``adopt_sizes_on_disk`` says which settings it kept. Files of
one kind with different sizes, index files of no geometry Skiff makes, and segments
too small for the largest message allowed are refused with an error that says what to
do, never opened at a wrong size.
"""

from __future__ import annotations

import dataclasses
import os

from ..wire.message_size import MAX_MESSAGE_SIZE_OPTION
from .config import StoreConfig
from .consume_queue import UNIT_SIZE
from .errors import StoreError
from .index_file import ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE, index_file_size

# Skiff and RocketMQ give an index file a hash slot for every four entries.
ENTRIES_PER_SLOT = 4


def _is_segment_name(name: str, digits: int) -> bool:
    return len(name) == digits and name.isdigit()


def _one_size(directory: str, names: list[str], what: str) -> int | None:
    sizes = {os.path.getsize(os.path.join(directory, name)) for name in names}
    if len(sizes) > 1:
        raise StoreError(
            f"{what} files in {directory} have different sizes ({sorted(sizes)}); "
            "a store's files all have one size: restore the odd one from a backup or move it away"
        )
    return sizes.pop() if sizes else None


def commit_log_segment_size(data_dir: str) -> int | None:
    """The segments' size, or None when there is no segment yet.

    A segment can only lose bytes (cut short by a copy or a file system), never gain
    them: where sizes differ, the size is the largest, which the segments' names (the
    offsets of their first bytes) must space them by. The short ones are zero-extended
    when the commit log is loaded and recovered up to their last valid record.
    """
    directory = os.path.join(data_dir, "commitlog")
    if not os.path.isdir(directory):
        return None
    names = sorted(n for n in os.listdir(directory) if _is_segment_name(n, 20))
    sizes = {os.path.getsize(os.path.join(directory, name)) for name in names}
    if len(sizes) <= 1:
        return sizes.pop() if sizes else None
    size = max(sizes)
    starts = [int(name) for name in names]
    if any(start % size for start in starts):
        raise StoreError(
            f"commit-log segment files in {directory} have different sizes ({sorted(sizes)}) "
            f"and names that are not multiples of the largest, {size}; a store's segments "
            "all have one size: restore the odd one from a backup or move it away"
        )
    return size


def consume_queue_units_per_file(data_dir: str) -> int | None:
    """Units per consume-queue file, from the first queue that has a file."""
    root = os.path.join(data_dir, "consumequeue")
    for dirpath, _, files in os.walk(root):
        names = [n for n in files if _is_segment_name(n, 20)]
        size = _one_size(dirpath, names, "consume-queue")
        if size:
            return max(1, size // UNIT_SIZE)
    return None


def index_geometry(data_dir: str) -> tuple[int, int] | None:
    """(hash slots, entries) of the index files, or None when there is none."""
    directory = os.path.join(data_dir, "index")
    if not os.path.isdir(directory):
        return None
    names = [n for n in os.listdir(directory) if _is_segment_name(n, 17)]
    size = _one_size(directory, names, "index")
    if size is None:
        return None
    slots, rest = divmod(size - HEADER_SIZE, SLOT_SIZE + ENTRIES_PER_SLOT * ENTRY_SIZE)
    if rest or slots < 1:
        raise StoreError(
            f"the index files in {directory} are {size} bytes, which no --index-file-entries "
            "makes with a hash slot per four entries; start with the --index-file-entries and "
            "--index-hash-slots the store was made with, or move the index directory away "
            "(the broker builds a new index from new messages)"
        )
    return slots, slots * ENTRIES_PER_SLOT


@dataclasses.dataclass(frozen=True)
class KeptSize:
    setting: str
    configured: int
    on_disk: int

    def __str__(self) -> str:
        return (
            f"the store keeps its {self.setting} of {self.on_disk} (configured: "
            f"{self.configured}, which applies to new stores)"
        )


def adopt_sizes_on_disk(config: StoreConfig) -> list[KeptSize]:
    """Set ``config``'s file sizes to those of the files in its data directory."""
    kept = []
    segment = commit_log_segment_size(config.data_dir)
    if segment is not None and segment != config.commit_log_file_size:
        kept.append(KeptSize("commit-log segment size", config.commit_log_file_size, segment))
        config.commit_log_file_size = segment
        if config.max_message_size + 1024 > segment:
            option = MAX_MESSAGE_SIZE_OPTION.name
            raise StoreError(
                f"the commit-log segments in {config.commit_log_dir} are {segment} bytes, too "
                f"small for {option} {config.max_message_size}: start this store with "
                f"{option} {segment - 1024} or less"
            )
    units = consume_queue_units_per_file(config.data_dir)
    if units is not None and units != config.consume_queue_units_per_file:
        kept.append(
            KeptSize("consume-queue file entries", config.consume_queue_units_per_file, units)
        )
        config.consume_queue_units_per_file = units
    if config.message_index_enable:
        configured = index_file_size(config.max_hash_slot_num, config.max_index_num)
        geometry = (
            index_geometry(config.data_dir)
            if _index_sizes_differ(config.data_dir, configured)
            else None
        )
        if geometry is not None:
            slots, entries = geometry
            kept.append(KeptSize("index file entries", config.max_index_num, entries))
            config.max_hash_slot_num, config.max_index_num = slots, entries
    return kept


def _index_sizes_differ(data_dir: str, configured: int) -> bool:
    directory = os.path.join(data_dir, "index")
    if not os.path.isdir(directory):
        return False
    return any(
        os.path.getsize(os.path.join(directory, n)) != configured
        for n in os.listdir(directory)
        if _is_segment_name(n, 17)
    )
