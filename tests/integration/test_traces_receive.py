"""``skiff traces receive``: the telemetry page's laptop recipe, run as written, yields
append and flush spans that ``skiff traces analyze`` reads; and bad exports are refused
without losing what came before.
"""

from __future__ import annotations

import gzip
import json
import re
import shlex
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.broker_process import broker_env, start_broker
from tests.support.kube_control_plane import free_port
from tests.support.waiting import wait_for

from skiff_broker.otlp_receiver import to_otlp_json

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "telemetry.md"
SKIFF = [sys.executable, "-m", "skiff_broker"]


def _recipe() -> tuple[str, str, list[str]]:
    """The laptop recipe's receiver line, broker line and traffic lines."""
    text = PAGE.read_text()
    section = text[text.index("## On a laptop") :]
    section = section[: section.index("\n## ", 1)]
    receive, broker, traffic = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return receive.strip(), broker.strip(), [line for line in traffic.splitlines() if line]


class Receiver:
    """A running ``skiff traces receive``; its endpoint from the line it prints."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [*SKIFF, *args],
            cwd=cwd,
            env=broker_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        first = self.proc.stderr.readline()
        found = re.search(r"receiving OTLP/HTTP on (http://\S+);", first)
        assert found, first
        self.endpoint = found.group(1)

    def stop(self) -> str:
        """SIGTERM, as Ctrl-C would; what it says at the end."""
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return err


@pytest.fixture
def receiver_at(tmp_path: Path) -> Iterator[list[Receiver]]:
    started: list[Receiver] = []
    yield started
    for receiver in started:
        if receiver.proc.poll() is None:
            receiver.proc.kill()
            receiver.proc.communicate()


def _spans(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [
        span
        for line in path.read_text().splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def test_the_laptop_recipe_gives_append_and_flush_spans_that_analyze_reads(
    tmp_path: Path, receiver_at: list[Receiver]
) -> None:
    receive_line, broker_line, traffic = _recipe()
    client_port, metrics_port, remoting_port = free_port(), free_port(), free_port()

    def on_free_ports(line: str) -> str:
        line = line.replace("127.0.0.1:8093", f"127.0.0.1:{client_port}")
        line = line.replace("127.0.0.1:8183", f"127.0.0.1:{remoting_port}")
        return line.replace("127.0.0.1:5569", f"127.0.0.1:{metrics_port}")

    receive = shlex.split(receive_line)
    assert receive[:3] == ["skiff", "traces", "receive"]
    receiver = Receiver([*receive[1:], "--listen", "127.0.0.1:0"], cwd=tmp_path)
    receiver_at.append(receiver)
    spans_file = tmp_path / receive[receive.index("--output") + 1]

    words = shlex.split(on_free_ports(broker_line))
    at = words.index("skiff")
    assignments, (command, *broker_args) = words[:at], words[at + 1 :]
    assert command == "broker"
    env = dict(word.split("=", 1) for word in assignments)
    assert env.pop("OTEL_EXPORTER_OTLP_ENDPOINT") == "http://127.0.0.1:4318"
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    # The broker's home is the test's folder, not ./traced-data.
    at = broker_args.index("--data-dir")
    del broker_args[at : at + 2]
    broker = start_broker(tmp_path, *broker_args, env=env)
    try:
        *sends, analyze_line = traffic
        for line in sends:
            done = subprocess.run(
                [*SKIFF, *shlex.split(on_free_ports(line))[1:]],
                env=broker_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"{line}: {done.stderr}"

        def appends_and_flushes() -> bool:
            names = [span["name"] for span in _spans(spans_file)]
            return names.count("skiff.store.append") >= 1 and "skiff.store.flush" in names

        # The broker's span processor exports every 5 s; the file grows as exports arrive.
        wait_for(appends_and_flushes, "append and flush spans in the receiver's file", 60)
    finally:
        broker.stop()
    said = receiver.stop()
    assert re.search(r"received \d+ spans in \d+ trace export\(s\)", said), said
    assert f"skiff traces analyze {receive[receive.index('--output') + 1]}" in said

    analyze = shlex.split(analyze_line)
    assert analyze[:3] == ["skiff", "traces", "analyze"]
    done = subprocess.run(
        [*SKIFF, *analyze[1:], "--json"],
        cwd=tmp_path,
        env=broker_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    overall = json.loads(done.stdout)["overall"]
    kinds = {(row["kind"], row["topic"]) for row in overall}
    assert ("append", "traced") in kinds and ("flush", "*") in kinds, overall
    appended = sum(s["name"] == "skiff.store.append" for s in _spans(spans_file))
    assert sum(r["count"] for r in overall if r["kind"] == "append") == appended


def test_a_bad_export_is_refused_and_what_came_before_is_kept(
    tmp_path: Path, receiver_at: list[Receiver]
) -> None:
    receiver = Receiver(
        ["traces", "receive", "--listen", "127.0.0.1:0", "--output", "spans.jsonl"], cwd=tmp_path
    )
    receiver_at.append(receiver)
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    request = trace_service_pb2.ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.name = "skiff.store.append"
    span.trace_id = bytes(range(16))
    span.span_id = bytes(range(8))

    def post(body: bytes, content_type: str, encoding: str = "") -> int:
        headers = {"Content-Type": content_type}
        if encoding:
            headers["Content-Encoding"] = encoding
        call = urllib.request.Request(
            f"{receiver.endpoint}/v1/traces", data=body, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(call, timeout=30) as answer:
                return answer.status
        except urllib.error.HTTPError as refused:
            return refused.code

    assert post(gzip.compress(request.SerializeToString()), "application/x-protobuf", "gzip") == 200
    assert post(to_otlp_json(request).encode(), "application/json") == 200
    assert post(b"\xff not protobuf", "application/x-protobuf") == 400
    assert post(b"{not json", "application/json") == 400
    said = receiver.stop()
    assert "received 2 spans in 2 trace export(s)" in said
    assert "refused 2 that did not parse" in said
    lines = (tmp_path / "spans.jsonl").read_text().splitlines()
    # Both exports, the JSON one read back with its hex IDs intact.
    assert [json.loads(line) for line in lines] == [json.loads(to_otlp_json(request))] * 2
