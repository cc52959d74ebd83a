"""The slow-callback report: asyncio's debug-mode record, in the broker's recognisable shape."""

from __future__ import annotations

import asyncio
import time

import pytest
import uvloop

from skiff_broker.assembly.slow_callbacks import (
    SLOW_CALLBACK_FIELD,
    SLOW_CALLBACK_PREFIX,
    report_slow_callbacks,
)


def held_loop_records(caplog: pytest.LogCaptureFixture, threshold_ms: float) -> list:
    def block() -> None:
        time.sleep(0.3)  # well past the threshold, whatever the machine's load

    async def main() -> None:
        loop = asyncio.get_running_loop()
        report_slow_callbacks(loop, threshold_ms)
        loop.call_soon(block)
        await asyncio.sleep(0.4)

    with caplog.at_level("WARNING", logger="asyncio"):
        uvloop.run(main())
    return [r for r in caplog.records if r.name == "asyncio"]


def test_a_callback_holding_the_loop_is_reported_with_its_duration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    records = held_loop_records(caplog, 100)
    [record] = [r for r in records if "block" in r.getMessage()]
    assert record.getMessage().startswith(SLOW_CALLBACK_PREFIX)
    assert "held the event loop for" in record.getMessage()
    assert getattr(record, SLOW_CALLBACK_FIELD) >= 300


def test_off_reports_nothing(caplog: pytest.LogCaptureFixture) -> None:
    assert held_loop_records(caplog, 0) == []
