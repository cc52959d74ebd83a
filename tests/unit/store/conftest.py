"""Shared fixtures for the store's unit tests: small, fast store settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skiff_broker.store.config import StoreConfig

# Small segments keep every test fast while still exercising rolls and retention.
SMALL_STORE = {
    "commit_log_file_size": 64 * 1024,
    "consume_queue_units_per_file": 100,
    "max_message_size": 16 * 1024,
    "max_hash_slot_num": 1000,
    "max_index_num": 4000,
    "warm_mapped_files": False,
    # The machine's own disk use must never make retention delete or refuse anything.
    "disk_max_used_space_ratio": 100,
    "disk_space_clean_forcibly_ratio": 1.0,
    "disk_space_warning_level_ratio": 1.0,
    "delete_commit_log_files_interval": 0.0,
}


@pytest.fixture
def store_config(tmp_path: Path) -> Callable[..., StoreConfig]:
    """``store_config(**overrides)`` -> a validated StoreConfig under ``tmp_path/store``."""

    def make(**overrides: Any) -> StoreConfig:
        settings = {"data_dir": str(tmp_path / "store"), **SMALL_STORE, **overrides}
        config = StoreConfig(**settings)
        config.validate()
        return config

    return make
