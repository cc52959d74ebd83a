"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session (local[2], no UI) for every Spark test: starting one is slow."""
    from skiff_broker.spark.session import local_session

    session = local_session("skiff-tests")
    yield session
    session.stop()
