"""``skiff traces analyze`` on spans a real broker exported, checked against the raw file."""

from __future__ import annotations

import csv
import json
import math
import re
import subprocess
import sys
from collections import defaultdict

import pytest
from tests.support.broker_process import broker_env
from tests.support.span_files import SpanFileRun, produce_span_file

from skiff_broker.spark.traces import NoSpansFound, analyze

# The elapsed time every progress line ends with, and Spark's task counts (said only
# while a step runs long, so their number depends on the machine).
STEP = re.compile(r" \(\d+\.\d s\)$")
SPARK_TASKS = re.compile(r"^  Spark: \d+ of \d+ tasks of \d+ stage\(s\) done")


def durations_in(traces_path) -> dict[tuple, list[float]]:
    """Span durations in ms by (kind, broker, topic, flush type, replication mode), read
    straight from the OTLP JSON lines."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for line in traces_path.read_text().splitlines():
        for resource_spans in json.loads(line)["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    if span["name"] not in ("skiff.store.append", "skiff.store.flush"):
                        continue
                    attributes = {
                        a["key"]: next(iter(a["value"].values())) for a in span["attributes"]
                    }
                    append = span["name"] == "skiff.store.append"
                    key = (
                        "append" if append else "flush",
                        attributes["skiff.broker"],
                        attributes["messaging.destination.name"] if append else "*",
                        attributes["skiff.flush_type"],
                        attributes["skiff.replication_mode"],
                    )
                    nanos = int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])
                    groups[key].append(nanos / 1e6)
    return groups


def nearest_rank(values: list[float], quantile: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(quantile * len(ordered)) - 1)]


def skiff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "skiff_broker", *args],
        env=broker_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def span_run(tmp_path_factory: pytest.TempPathFactory) -> SpanFileRun:
    """Spans a real broker exported, for the tests that analyse them (each runs Spark once)."""
    return produce_span_file(
        tmp_path_factory.mktemp("spans"), flush_type="SYNC_FLUSH", broker_name="broker-a"
    )


def test_analyze_reports_append_and_flush_latency_of_real_spans(span_run, tmp_path):
    run = span_run
    expected = durations_in(run.traces_path)
    # What the broker was asked to do shows in the input: one append per sampled send. A broker
    # without replicas still reports its configured replication mode, ASYNC by default.
    assert len(expected[("append", "broker-a", "SpanTopicA", "SYNC_FLUSH", "ASYNC")]) == 20
    assert ("flush", "broker-a", "*", "SYNC_FLUSH", "ASYNC") in expected

    out = tmp_path / "report"
    done = skiff(
        "traces", "analyze", str(run.traces_path.parent), "--output", str(out),
        "--window", "10 minutes", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # Only the command's own lines, its steps as they start: Spark's JVM writes to a log
    # beside the report. A step that runs long also says how far Spark's tasks are.
    lines = done.stderr.splitlines()
    span_files = [p for p in run.traces_path.parent.iterdir() if p.suffix in (".json", ".jsonl")]
    assert lines[0].startswith("analysing ") and lines[0].endswith(" with a local Spark job ...")
    steps = [STEP.sub("", line) for line in lines[1:] if not SPARK_TASKS.match(line)]
    assert steps == [
        "  starting Spark",
        f"  reading spans from {len(span_files)} file(s)",
        f"  found {sum(len(v) for v in expected.values())} spans; computing latency per "
        "group and 10 minutes window",
        steps[3],  # the summary's row count, checked below
        "  done",
    ], done.stderr[-3000:]
    assert steps[3].startswith("  writing the summary (") and steps[3].endswith(
        " rows) and the plot"
    )
    assert all(STEP.search(line) for line in lines[1:])
    assert (out / "spark.log").is_file()
    report = json.loads(done.stdout)

    assert report["spans"] == sum(len(v) for v in expected.values())
    overall = {
        (r["kind"], r["broker"], r["topic"], r["flush_type"], r["replication_mode"]): r
        for r in report["overall"]
    }
    assert set(overall) == set(expected)
    for key, values in expected.items():
        row = overall[key]
        assert row["count"] == len(values)
        assert row["failures"] == 0
        assert math.isclose(row["max_ms"], max(values), rel_tol=1e-9)
        assert math.isclose(row["mean_ms"], sum(values) / len(values), rel_tol=1e-9)
        for quantile, column in ((0.5, "p50_ms"), (0.9, "p90_ms"), (0.99, "p99_ms")):
            assert math.isclose(row[column], nearest_rank(values, quantile), rel_tol=1e-9)

    with open(report["summary"], newline="") as summary:
        rows = list(csv.DictReader(summary))
    assert sum(int(r["count"]) for r in rows) == report["spans"]
    assert {(r["kind"], r["topic"]) for r in rows} == {(k[0], k[2]) for k in expected}
    assert all(r["window_start"] < r["window_end"] for r in rows)
    with open(report["plot"], "rb") as png:
        assert png.read(8) == b"\x89PNG\r\n\x1a\n"


def test_the_table_shows_the_mean_beside_the_percentiles(span_run, tmp_path):
    run = span_run
    expected = durations_in(run.traces_path)
    # The README promises count, failures, mean, p50, p90, p99 and max on the terminal.
    shown = skiff(
        "traces", "analyze", str(run.traces_path.parent), "--output", str(tmp_path / "table"),
        "--window", "10 minutes",
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-3000:]
    header, *table_rows = shown.stdout.splitlines()[: 1 + len(expected)]
    columns = header.split()
    assert "MEAN" in columns and columns.index("MEAN") < columns.index("P50")
    for line in table_rows:
        kind, broker, topic, flush, replication, count, failed, mean = line.split()[:8]
        values = expected[(kind, broker, topic, flush, replication)]
        assert (int(count), int(failed)) == (len(values), 0)
        assert math.isclose(float(mean), sum(values) / len(values), abs_tol=0.0005)


def test_analyze_says_what_is_wrong_with_its_input(spark, tmp_path):
    not_spans = tmp_path / "other.jsonl"
    not_spans.write_text(json.dumps({"resourceSpans": []}) + "\n" + '{"resourceMetrics": []}\n')
    with pytest.raises(NoSpansFound, match=r"no skiff\.store\.append or skiff\.store\.flush span"):
        analyze(spark, [str(not_spans)], tmp_path / "out")

    missing = skiff("traces", "analyze", str(tmp_path / "nowhere.jsonl"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr

    # Without the spark extra the command says what to install.
    without_spark = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['pyspark'] = None; from skiff_broker.cli import main; main()",
            "traces",
            "analyze",
            str(not_spans),
        ],
        env=broker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert without_spark.returncode == 1
    assert "pip install 'skiff-broker[spark]'" in without_spark.stderr
