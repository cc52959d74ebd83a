"""Append and flush latency from exported spans: the job behind ``skiff traces analyze``.

Input: OTLP JSON files as the OpenTelemetry Collector's file exporter writes them,
one ``ExportTraceServiceRequest`` per line. Every ``skiff.store.append`` and
``skiff.store.flush`` span is one sample of its duration. Samples are grouped by
kind (append or flush), broker, topic (appends only: a flush serves every topic,
its topic is ``*``), flush type and replication mode, per time window of the
span's start, and each group gets its count, failures, mean, p50, p90, p99 and
max in milliseconds. The summary goes to a CSV or Parquet file, the p50 and p99
lines over time to a PNG plot whose time axis spans the windows, however few.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from pyspark.sql import DataFrame, SparkSession

APPEND_SPAN = "skiff.store.append"
FLUSH_SPAN = "skiff.store.flush"
ALL_TOPICS = "*"
UNKNOWN = "unknown"
DEFAULT_WINDOW = "1 minute"
QUANTILES = (0.5, 0.9, 0.99)
# percentile_approx's accuracy: 1/10000 relative rank error; exact for small groups.
PERCENTILE_ACCURACY = 10000

SUMMARY_COLUMNS = (
    "kind",
    "broker",
    "topic",
    "flush_type",
    "replication_mode",
    "window_start",
    "window_end",
    "count",
    "failures",
    "mean_ms",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "max_ms",
)

_KEY_VALUE = (
    "array<struct<key: string, value: struct<stringValue: string, intValue: string, "
    "doubleValue: double, boolValue: boolean>>>"
)
# The parts of an OTLP JSON export request this job reads; everything else is ignored.
OTLP_TRACES_DDL = (
    "resourceSpans array<struct<"
    f"resource: struct<attributes: {_KEY_VALUE}>, "
    "scopeSpans: array<struct<spans: array<struct<"
    "traceId: string, spanId: string, name: string, "
    "startTimeUnixNano: string, endTimeUnixNano: string, "
    f"attributes: {_KEY_VALUE}, status: struct<code: int>>>>>>>"
)


class NoSpansFound(ValueError):
    """The input held no append or flush span."""


@dataclasses.dataclass(frozen=True, slots=True)
class Analysis:
    summary_path: Path
    plot_path: Path
    spans: int
    windows: list[dict[str, Any]]  # the summary rows, per time window
    overall: list[dict[str, Any]]  # the same groups over the whole input


def load_spans(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """One row per append or flush span: kind, group columns, start time, duration, failed."""
    from pyspark.sql import functions as F

    lines = spark.read.text(list(paths)).where(F.length(F.trim("value")) > 0)
    requests = lines.select(F.from_json("value", OTLP_TRACES_DDL).alias("request"))
    resource_spans = requests.select(F.explode("request.resourceSpans").alias("rs"))
    scope_spans = resource_spans.select(
        _attributes("rs.resource.attributes").alias("resource"),
        F.explode("rs.scopeSpans").alias("ss"),
    )
    spans = scope_spans.select("resource", F.explode("ss.spans").alias("span")).where(
        F.col("span.name").isin(APPEND_SPAN, FLUSH_SPAN)
    )
    attributes = spans.select(
        "resource", "span", _attributes("span.attributes").alias("attributes")
    )

    def attribute(key: str) -> Any:
        # A span's own attribute first, then its resource's (the broker sets both).
        return F.coalesce(
            F.col("attributes").getItem(key), F.col("resource").getItem(key), F.lit(UNKNOWN)
        )

    start_ns = F.col("span.startTimeUnixNano").cast("decimal(20,0)")
    end_ns = F.col("span.endTimeUnixNano").cast("decimal(20,0)")
    is_append = F.col("span.name") == APPEND_SPAN
    outcome = F.col("attributes").getItem("skiff.flush.outcome")
    put_status = F.col("attributes").getItem("skiff.put_status")
    failed = (F.col("span.status.code") == 2) | F.when(
        is_append, put_status.isNotNull() & (put_status != "PUT_OK")
    ).otherwise(outcome.isNotNull() & (outcome != "ok"))
    return attributes.select(
        F.when(is_append, "append").otherwise("flush").alias("kind"),
        attribute("skiff.broker").alias("broker"),
        F.when(is_append, attribute("messaging.destination.name"))
        .otherwise(F.lit(ALL_TOPICS))
        .alias("topic"),
        attribute("skiff.flush_type").alias("flush_type"),
        attribute("skiff.replication_mode").alias("replication_mode"),
        F.timestamp_micros((start_ns / 1000).cast("long")).alias("start"),
        ((end_ns - start_ns) / F.lit(1_000_000)).cast("double").alias("duration_ms"),
        F.coalesce(failed, F.lit(False)).alias("failed"),
    ).where(F.col("duration_ms").isNotNull())


def _attributes(column: str) -> Any:
    """An OTLP attribute list as a map of key to its value as text."""
    from pyspark.sql import functions as F

    return F.map_from_entries(
        F.transform(
            F.coalesce(F.col(column), F.array()),
            lambda kv: F.struct(
                kv["key"].alias("key"),
                F.coalesce(
                    kv["value"]["stringValue"],
                    kv["value"]["intValue"],
                    kv["value"]["doubleValue"].cast("string"),
                    kv["value"]["boolValue"].cast("string"),
                ).alias("value"),
            ),
        )
    )


_GROUP = ("kind", "broker", "topic", "flush_type", "replication_mode")


def _latency_columns() -> list[Any]:
    from pyspark.sql import functions as F

    quantiles = F.percentile_approx(
        "duration_ms", list(QUANTILES), PERCENTILE_ACCURACY
    )  # one pass for all three
    return [
        F.count("*").alias("count"),
        F.sum(F.col("failed").cast("int")).alias("failures"),
        F.avg("duration_ms").alias("mean_ms"),
        quantiles.alias("quantiles"),
        F.max("duration_ms").alias("max_ms"),
    ]


def _rows(frame: DataFrame) -> list[dict[str, Any]]:
    rows = []
    for row in frame.collect():
        record = row.asDict()
        p50, p90, p99 = record.pop("quantiles")
        record.update(p50_ms=p50, p90_ms=p90, p99_ms=p99)
        rows.append(record)
    return rows


def summarize(
    spans: DataFrame, window: str = DEFAULT_WINDOW
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(per-window rows, whole-input rows), sorted by group and time."""
    from pyspark.sql import functions as F

    windowed = (
        spans.groupBy(*_GROUP, F.window("start", window).alias("window"))
        .agg(*_latency_columns())
        .select(
            *_GROUP,
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "count",
            "failures",
            "mean_ms",
            "quantiles",
            "max_ms",
        )
        .orderBy(*_GROUP, "window_start")
    )
    overall = (
        spans.groupBy(*_GROUP)
        .agg(F.min("start").alias("window_start"), F.max("start").alias("window_end"))
        .join(spans.groupBy(*_GROUP).agg(*_latency_columns()), list(_GROUP))
        .orderBy(*_GROUP)
    )
    return _rows(windowed), _rows(overall)


def write_summary(rows: Sequence[dict[str, Any]], path: Path, file_format: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if file_format == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(
            [{c: r[c] for c in SUMMARY_COLUMNS} for r in rows],
            schema=pa.schema(
                [
                    *(pa.field(c, pa.string()) for c in SUMMARY_COLUMNS[:5]),
                    pa.field("window_start", pa.timestamp("us", tz="UTC")),
                    pa.field("window_end", pa.timestamp("us", tz="UTC")),
                    pa.field("count", pa.int64()),
                    pa.field("failures", pa.int64()),
                    *(pa.field(c, pa.float64()) for c in SUMMARY_COLUMNS[9:]),
                ]
            ),
        )
        pq.write_table(table, path)
        return path
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=SUMMARY_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {
                    **row,
                    "window_start": _iso(row["window_start"]),
                    "window_end": _iso(row["window_end"]),
                }
            )
    return path


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def plot(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """The latency figure of ``rows`` as a PNG file."""
    import matplotlib.pyplot as plt

    figure = latency_figure(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def latency_figure(rows: Sequence[dict[str, Any]]) -> Figure:
    """p50 (dashed) and p99 (solid) per group over time: appends above, flushes below.

    Each point sits at its window's start; the time axis runs from the first window's start
    to the last one's end (left alone, matplotlib spans years around a single window).
    """
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 1, figsize=(11, 8), sharex=True)
    for axis, kind in zip(axes, ("append", "flush"), strict=True):
        series: dict[tuple, list[dict[str, Any]]] = {}
        for row in rows:
            if row["kind"] == kind:
                key = (row["broker"], row["topic"], row["flush_type"], row["replication_mode"])
                series.setdefault(key, []).append(row)
        for (broker, topic, flush_type, mode), points in sorted(series.items()):
            times = [p["window_start"] for p in points]
            label = f"{broker} {topic} {flush_type} {mode}"
            (line,) = axis.plot(times, [p["p99_ms"] for p in points], marker="o", label=label)
            axis.plot(
                times,
                [p["p50_ms"] for p in points],
                linestyle="--",
                marker=".",
                color=line.get_color(),
            )
        axis.set_title(f"{kind} latency (p99 solid, p50 dashed)")
        axis.set_ylabel("ms")
        axis.grid(True, alpha=0.3)
        if series:
            axis.legend(fontsize="small", loc="upper left")
        else:
            axis.text(0.5, 0.5, f"no {kind} spans", ha="center", transform=axis.transAxes)
    if rows:
        axes[-1].set_xlim(
            min(row["window_start"] for row in rows), max(row["window_end"] for row in rows)
        )
    axes[-1].set_xlabel("window start (UTC)")
    figure.autofmt_xdate()
    figure.tight_layout()
    return figure


def analyze(
    spark: SparkSession,
    paths: Sequence[str],
    output: Path,
    *,
    window: str = DEFAULT_WINDOW,
    file_format: str = "csv",
    progress: Callable[[str], object] = lambda step: None,
) -> Analysis:
    """Summarise the spans of ``paths`` into ``output``; ``progress`` hears of each step
    as it starts (or ends, with what it found)."""
    progress(f"reading spans from {len(paths)} file(s)")
    spans = load_spans(spark, paths).cache()
    try:
        count = spans.count()
        if count == 0:
            raise NoSpansFound(
                f"no {APPEND_SPAN} or {FLUSH_SPAN} span in {', '.join(paths)}; are these "
                "OTLP JSON trace files of a Skiff broker with tracing on?"
            )
        progress(f"found {count} spans; computing latency per group and {window} window")
        windows, overall = summarize(spans, window)
    finally:
        spans.unpersist()
    suffix = "parquet" if file_format == "parquet" else "csv"
    progress(f"writing the summary ({len(windows)} rows) and the plot")
    summary_path = write_summary(windows, output / f"latency-summary.{suffix}", file_format)
    plot_path = plot(windows, output / "latency.png")
    return Analysis(summary_path, plot_path, count, windows, overall)


def format_ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.3f}"
