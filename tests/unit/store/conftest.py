"""Shared fixtures for the store's unit tests: small, fast store settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.support.store_settings import small_store

from skiff_broker.store.config import StoreConfig

# 64 KiB segments: many rolls in little data.
SMALL_STORE = small_store(commit_log_file_size=64 * 1024, delete_commit_log_files_interval=0.0)


@pytest.fixture
def store_config(tmp_path: Path) -> Callable[..., StoreConfig]:
    """``store_config(**overrides)`` -> a validated StoreConfig under ``tmp_path/store``."""

    def make(**overrides: Any) -> StoreConfig:
        settings = {"data_dir": str(tmp_path / "store"), **SMALL_STORE, **overrides}
        config = StoreConfig(**settings)
        config.validate()
        return config

    return make
