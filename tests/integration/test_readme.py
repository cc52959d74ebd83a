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
