"""The getting-started page works as written: every shell and Python block, in order,
against a real broker started as its first block says.

The first block is the README's set-up command (install, then ``skiff broker``); its
install part is the README's and checked there (test_readme), and its ``skiff broker``
is the broker this test runs. Every other block runs line by line, with the page's
addresses swapped for the test broker's.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from docs.hooks.reference import metric_rows
from tests.support.broker_process import broker_env, running_broker

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"
README = ROOT / "README.md"
ENDPOINT = "127.0.0.1:8081"
METRICS_URL = "http://127.0.0.1:5557/metrics"


def _blocks(text: str) -> list[tuple[str, str]]:
    """Every ``sh`` and ``python`` block of ``text``: (language, code), in order."""
    return re.findall(r"```(sh|python)\n(.*?)```", text, flags=re.S)


def _readme_set_up() -> str:
    text = README.read_text()
    start = text.index("## Set up\n")
    return _blocks(text[start : text.index("\n## ", start + 1)])[0][1]


def test_every_block_of_the_getting_started_page_runs_as_written(tmp_path: Path) -> None:
    (language, set_up), *rest = _blocks(PAGE.read_text())
    assert language == "sh" and set_up == _readme_set_up()
    assert set_up.strip().rpartition("&& ")[2] == "skiff broker"
    outputs: list[tuple[str, str]] = []
    with running_broker(tmp_path) as broker:

        def run(command: list[str] | str, shell: bool = False) -> str:
            done = subprocess.run(
                command,
                shell=shell,
                env=broker_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"{command}: {done.stderr}"
            return done.stdout + done.stderr

        for language, code in rest:
            if language == "python":
                snippet = code.replace(ENDPOINT, broker.endpoint)
                outputs.append((code, run([sys.executable, "-c", snippet])))
                continue
            for line in code.splitlines():
                if not line.strip():
                    continue
                if line.startswith("skiff "):
                    words = shlex.split(line.replace(ENDPOINT, broker.endpoint), comments=True)
                    if "--endpoint" not in words:
                        words += ["--endpoint", broker.endpoint]
                    outputs.append((line, run([sys.executable, "-m", "skiff_broker", *words[1:]])))
                else:
                    command = line.replace(METRICS_URL, broker.metrics_url)
                    assert command != line, f"a line the test cannot point at its broker: {line}"
                    outputs.append((line, run(command, shell=True)))
        scrape = run(["curl", "-s", broker.metrics_url])

    said = dict(outputs)

    def output(start: str) -> str:
        (found,) = [out for line, out in said.items() if line.startswith(start)]
        return found

    assert "created topic demo" in output("skiff topic create demo")
    python_out = output("from rocketmq import")
    assert re.search(r"^sent 01[0-9A-F]{32}$", python_out, re.M), python_out
    assert "received b'hello, skiff' greeting {'order-1'}" in python_out
    assert "sent" in output("skiff send")
    assert "hello from the shell" in output("skiff consume")
    assert "total lag of group demo-readers on demo: 1" in output("skiff admin lag")
    assert re.search(r"^demo\b", output("skiff topic list"), re.M)
    groups = output("skiff group list")
    assert "demo-readers" in groups and "shell-readers" in groups
    assert "MASTER" in output("skiff admin info")
    assert re.search(r'rocketmq_messages_in_total\{[^}]*topic="demo"[^}]*\} 2\.0', output("curl"))
    # What the broker serves is what the metrics reference lists.
    served = set(re.findall(r"^# TYPE (\S+) ", scrape, re.M))
    documented = {row.name for row in metric_rows()}
    assert served and served <= documented, sorted(served - documented)
