"""The README's walkthrough works as written, against a real broker."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.broker_process import broker_env, running_broker

README = Path(__file__).resolve().parents[2] / "README.md"
README_ENDPOINT = "127.0.0.1:8081"


def _section(name: str) -> str:
    text = README.read_text()
    start = text.index(f"## {name}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def test_produce_and_consume_walkthrough(tmp_path):
    section = _section("Produce and consume")
    create_topic, shell = _blocks(section, "sh")
    (snippet,) = _blocks(section, "python")
    with running_broker(tmp_path) as broker:

        def run(command: list[str], **kwargs) -> str:
            done = subprocess.run(
                command, env=broker_env(), capture_output=True, text=True, timeout=120, **kwargs
            )
            assert done.returncode == 0, done.stderr
            return done.stdout

        def skiff(line: str) -> str:
            args = shlex.split(line.replace(README_ENDPOINT, broker.endpoint))
            assert args[0] == "skiff"
            return run(
                [sys.executable, "-m", "skiff_broker", *args[1:], "--endpoint", broker.endpoint]
            )

        assert "created topic demo" in skiff(
            create_topic.strip().replace(" --endpoint 127.0.0.1:8081", "")
        )
        out = run([sys.executable, "-c", snippet.replace(README_ENDPOINT, broker.endpoint)])
        assert re.search(r"^sent 01[0-9A-F]{32}$", out, re.M), out
        assert "received b'hello, skiff' greeting {'order-1'}" in out

        send, consume, lag = [line for line in shell.splitlines() if line.strip()]
        assert "sent" in skiff(send)
        assert "hello from the shell" in skiff(consume)
        # demo-readers acked what it received; only the message sent from the shell
        # after it stopped is left for it.
        assert "total lag of group demo-readers on demo: 1" in skiff(lag)


def test_skiffs_own_clients_snippet(tmp_path):
    (snippet,) = _blocks(_section("Skiff's own clients, for throughput"), "python")
    with running_broker(tmp_path) as broker:
        created = subprocess.run(
            [
                *(sys.executable, "-m", "skiff_broker", "topic", "create", "demo"),
                *("--read-queues", "4", "--write-queues", "4", "--endpoint", broker.endpoint),
            ],
            env=broker_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert created.returncode == 0, created.stderr
        done = subprocess.run(
            [sys.executable, "-c", snippet.replace(README_ENDPOINT, broker.endpoint)],
            env=broker_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"01[0-9A-F]{32} 10000", lines[0]), lines[0]
    read = lines[1:]
    # Every message comes back once, from the four queues.
    assert len(read) == 10_001
    assert {line.split()[0] for line in read} == {"0", "1", "2", "3"}
    assert sum("b'one'" in line for line in read) == 1
    assert sum("b'many " in line for line in read) == 10_000
