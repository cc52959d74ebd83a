"""The latency plot of `skiff traces analyze` (matplotlib only, no Spark needed)."""

from __future__ import annotations

from datetime import datetime, time, timedelta

import matplotlib.dates

from skiff_broker.spark.traces import latency_figure

START = datetime(2026, 11, 25, 19, 28)


def window_row(kind: str, topic: str, start: datetime, length: timedelta) -> dict:
    return {
        "kind": kind,
        "broker": "broker-a",
        "topic": topic,
        "flush_type": "SYNC_FLUSH",
        "replication_mode": "ASYNC",
        "window_start": start,
        "window_end": start + length,
        "p50_ms": 1.5,
        "p99_ms": 4.0,
    }


def time_axis(rows: list[dict]) -> tuple[list[str], list[datetime]]:
    """The tick labels a reader sees under the plot, and where the axis starts and ends."""
    figure = latency_figure(rows)
    figure.canvas.draw()
    axis = figure.axes[-1]
    labels = [label.get_text() for label in axis.get_xticklabels() if label.get_text()]
    ends = [matplotlib.dates.num2date(x).replace(tzinfo=None) for x in axis.get_xlim()]
    return labels, ends


def test_a_single_window_is_drawn_over_that_window_not_over_years() -> None:
    minute = timedelta(minutes=1)
    labels, ends = time_axis(
        [window_row("append", "orders", START, minute), window_row("flush", "*", START, minute)]
    )
    assert ends == [START, START + minute]
    # Every label is a time of day within the window (years around it would show dates).
    assert len(labels) >= 2
    for label in labels:
        assert time(19, 28) <= time.fromisoformat(label) <= time(19, 29), labels


def test_several_windows_are_drawn_from_the_first_start_to_the_last_end() -> None:
    ten_seconds = timedelta(seconds=10)
    rows = [window_row("append", "orders", START + i * ten_seconds, ten_seconds) for i in range(3)]
    _, ends = time_axis(rows)
    assert ends == [START, START + 3 * ten_seconds]
