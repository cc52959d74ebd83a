"""A real broker runtime (store, topics, offsets, pop) in a temporary directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.store_settings import small_store

from skiff_broker.config import BrokerConfig
from skiff_broker.runtime import Broker
from skiff_broker.store.config import StoreConfig

SMALL_STORE = small_store()


def _running(tmp_path: Path, **store: object) -> Iterator[Broker]:
    config = BrokerConfig(
        store=StoreConfig(data_dir=str(tmp_path / "data"), **{**SMALL_STORE, **store}),
        # Never in a test's lifetime: admin answers must not wait for the periodic persist.
        persist_interval_s=3600,
    )
    runtime = Broker(config)
    runtime.start()
    yield runtime
    runtime.stop()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    yield from _running(tmp_path)


@pytest.fixture(params=["direct", "transient-pool"])
def any_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    """A broker writing straight to the file, and one writing through the transient pool
    (appends become readable only once the commit service copies them to the file)."""
    pool = request.param == "transient-pool"
    yield from _running(tmp_path, transient_store_pool_enable=pool)
