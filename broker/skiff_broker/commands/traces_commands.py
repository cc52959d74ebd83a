"""``skiff traces receive`` and ``skiff traces analyze``: span files from a broker's OTLP
export, and append and flush latency percentiles from them.

``receive`` writes what ``analyze`` reads: OTLP JSON lines, as the OpenTelemetry
Collector's file exporter writes them, so either tool's files work with the other.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import click

from .output import table

_WINDOW = re.compile(r"^\s*\d+\s+(second|minute|hour|day)s?\s*$", re.IGNORECASE)


def _check_window(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not _WINDOW.match(value):
        raise click.BadParameter(
            f"expected a duration like '1 minute' or '10 seconds'; got {value!r}"
        )
    return value.strip()


def _input_files(paths: tuple[str, ...]) -> list[str]:
    """Files named, files in named folders, and glob matches; sorted, without repeats."""
    found: list[str] = []
    for path in paths:
        matches = glob.glob(path) or [path]
        for match in matches:
            if os.path.isdir(match):
                found += [
                    os.path.join(match, name)
                    for name in sorted(os.listdir(match))
                    if name.endswith((".json", ".jsonl")) and not name.startswith(".")
                ]
            elif os.path.isfile(match):
                found.append(match)
            else:
                raise click.BadParameter(f"{match} does not exist", param_hint="PATHS")
    if not found:
        raise click.BadParameter("no .json or .jsonl span file found", param_hint="PATHS")
    return sorted(dict.fromkeys(os.path.abspath(f) for f in found))


def _json_ready(row: dict[str, Any]) -> dict[str, Any]:
    return {
        key: value.isoformat().replace("+00:00", "Z") if hasattr(value, "isoformat") else value
        for key, value in row.items()
    }


@click.group()
def traces() -> None:
    """Receive and analyse spans the broker exports."""


def _listen_address(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise click.BadParameter(f"expected HOST:PORT, e.g. 127.0.0.1:4318; got {value!r}")
    return host.strip("[]"), int(port)


@traces.command()
@click.option(
    "--listen",
    default="127.0.0.1:4318",
    show_default=True,
    callback=_listen_address,
    help="HOST:PORT to receive OTLP/HTTP exports on (4318 is OTLP/HTTP's port; 0 picks one).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("otlp/traces.jsonl"),
    show_default=True,
    help="File the spans are appended to, one export a line, for skiff traces analyze.",
)
def receive(listen: tuple[str, int], output: Path) -> None:
    """Receive the spans a broker exports and write them for skiff traces analyze.

    A small OTLP/HTTP receiver (protobuf or JSON) for a laptop, in place of an
    OpenTelemetry Collector: start the broker with
    OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:PORT pointing here. Each trace export is
    appended to --output as it arrives; metrics are taken and counted, not kept. Runs
    until Ctrl-C or SIGTERM.
    """
    import signal
    import threading

    from ..otlp_receiver import OtlpReceiver

    host, port = listen
    try:
        receiver = OtlpReceiver(host, port, keep=False, traces_file=output)
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {host}:{port} ({exc.strerror}); pick another with --listen"
        ) from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with receiver:
        click.echo(
            f"receiving OTLP/HTTP on {receiver.endpoint}; appending spans to {output}. Start "
            f"the broker with OTEL_EXPORTER_OTLP_ENDPOINT={receiver.endpoint} (and "
            "OTEL_TRACES_SAMPLER=always_on to trace every request, not 1%); Ctrl-C stops",
            err=True,
        )
        while not stop.wait(0.5):
            pass
    click.echo(
        f"received {receiver.span_count} spans in {receiver.trace_requests_received} trace "
        f"export(s) and {receiver.metric_requests} metrics export(s)"
        + (f"; refused {receiver.rejected} that did not parse" if receiver.rejected else "")
        + f". Analyse them with: skiff traces analyze {output}",
        err=True,
    )


@traces.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False),
    default="skiff-latency",
    show_default=True,
    help="Folder for latency-summary.csv (or .parquet) and latency.png.",
)
@click.option(
    "--window",
    default="1 minute",
    show_default=True,
    callback=_check_window,
    help="Time window of each summary row, e.g. '10 seconds', '5 minutes'.",
)
@click.option(
    "--format",
    "file_format",
    type=click.Choice(["csv", "parquet"]),
    default="csv",
    show_default=True,
    help="Format of the summary file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def analyze(
    paths: tuple[str, ...], output: str, window: str, file_format: str, as_json: bool
) -> None:
    """Append and flush latency percentiles per broker, topic, flush type and replication mode.

    PATHS are OTLP JSON trace files as the OpenTelemetry Collector's file exporter
    writes them (one export request per line), folders of them, or globs. Runs a
    local Spark job (needs pip install 'skiff-broker[spark]' and Java 17+).
    """
    from ..spark import SparkExtraMissing, require_spark

    files = _input_files(paths)
    try:
        require_spark()
    except SparkExtraMissing as exc:
        raise click.ClickException(str(exc)) from None
    from ..spark.session import local_session
    from ..spark.traces import NoSpansFound, format_ms
    from ..spark.traces import analyze as run_analysis

    click.echo(f"analysing {len(files)} span file(s) with a local Spark job ...", err=True)
    # On a machine's first plot matplotlib logs that it builds its font cache; the line
    # above already says the command is busy.
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    # Spark's JVM writes there, not between this command's lines.
    spark_log = Path(output) / "spark.log"
    try:
        spark = local_session("skiff-traces-analyze", jvm_log=spark_log)
    except Exception as exc:
        reason = " ".join(str(exc).split())
        raise click.ClickException(
            f"Spark did not start ({reason}); see {spark_log} for why. Spark needs Java 17 "
            "or newer: check that `java -version` works here, or point JAVA_HOME at one"
        ) from None
    try:
        result = run_analysis(spark, files, Path(output), window=window, file_format=file_format)
    except NoSpansFound as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        spark.stop()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "spans": result.spans,
                    "summary": str(result.summary_path),
                    "plot": str(result.plot_path),
                    "overall": [_json_ready(r) for r in result.overall],
                    "windows": [_json_ready(r) for r in result.windows],
                }
            )
        )
        return
    click.echo(
        table(
            [
                "KIND",
                "BROKER",
                "TOPIC",
                "FLUSH",
                "REPLICATION",
                "COUNT",
                "FAILED",
                "P50 MS",
                "P90 MS",
                "P99 MS",
                "MAX MS",
            ],
            [
                [
                    r["kind"],
                    r["broker"],
                    r["topic"],
                    r["flush_type"],
                    r["replication_mode"],
                    r["count"],
                    r["failures"],
                    format_ms(r["p50_ms"]),
                    format_ms(r["p90_ms"]),
                    format_ms(r["p99_ms"]),
                    format_ms(r["max_ms"]),
                ]
                for r in result.overall
            ],
        )
    )
    click.echo(
        f"\n{result.spans} spans in {len(result.windows)} windowed groups ({window} windows)"
        f"\nsummary: {result.summary_path}\nplot:    {result.plot_path}"
    )
