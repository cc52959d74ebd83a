"""Fixtures for telemetry tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.unit.telemetry.pipelines import Pipelines, in_memory_pipelines


@pytest.fixture
def pipelines() -> Iterator[Pipelines]:
    pipes = in_memory_pipelines()
    yield pipes
    pipes.tracer_provider.shutdown()
