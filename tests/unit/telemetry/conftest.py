"""Fixtures for telemetry tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from tests.unit.telemetry.pipelines import Pipelines, in_memory_pipelines


@pytest.fixture
def pipelines() -> Iterator[Pipelines]:
    pipes = in_memory_pipelines()
    yield pipes
    pipes.tracer_provider.shutdown()


@pytest.fixture
def no_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test starts from no OTEL_* variable at all, whatever the machine has."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
