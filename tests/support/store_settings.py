"""Small store settings for tests: fast, yet segments still roll and retention still runs."""

from __future__ import annotations

from typing import Any

SMALL_STORE: dict[str, Any] = {
    "commit_log_file_size": 256 * 1024,
    "consume_queue_units_per_file": 100,
    "max_message_size": 16 * 1024,
    "max_hash_slot_num": 1000,
    "max_index_num": 4000,
    "warm_mapped_files": False,
    # The machine's own disk use must never make the store delete or refuse anything.
    "disk_max_used_space_ratio": 100,
    "disk_space_clean_forcibly_ratio": 1.0,
    "disk_space_warning_level_ratio": 1.0,
}


def small_store(**overrides: Any) -> dict[str, Any]:
    return {**SMALL_STORE, **overrides}
