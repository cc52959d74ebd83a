"""The Spark page's examples work as written: its shell block makes the topics the Python
examples read and write, the read shows the orders sent, and the streaming write stores
messages in `events` under a checkpoint in the working directory.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.support.broker_process import broker_env, running_broker

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "spark.md"
ENDPOINT = "127.0.0.1:8081"


def _section() -> str:
    text = PAGE.read_text()
    start = text.index("## Reading and writing topics")
    return text[start : text.index("\n## ", start + 1)]


def test_the_spark_examples_read_and_write_the_topics_the_page_creates(tmp_path: Path) -> None:
    section = _section()
    (shell,) = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    read, write = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    work = tmp_path / "work"
    work.mkdir()
    with running_broker(tmp_path) as broker:

        def skiff(line: str) -> str:
            words = shlex.split(line.replace(ENDPOINT, broker.endpoint))
            assert words[0] == "skiff"
            if "--endpoint" not in words:
                words += ["--endpoint", broker.endpoint]
            done = subprocess.run(
                [sys.executable, "-m", "skiff_broker", *words[1:]],
                env=broker_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"{line}: {done.stderr}"
            return done.stdout + done.stderr

        for line in shell.splitlines():
            if line.strip():
                skiff(line)
        # The write example goes on from the read example's session, as on the page.
        program = (read + "\n" + write).replace(ENDPOINT, broker.endpoint)
        done = subprocess.run(
            [sys.executable, "-c", program],
            cwd=work,
            env=broker_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        # The read showed both orders the shell block sent.
        assert "order-1" in done.stdout and "order-2" in done.stdout, done.stdout
        peeked = skiff("skiff consume --topic events --peek")
    # The rate source's rows, as JSON bodies, in the topic the write names.
    assert re.search(r'"value":\s*0\b', peeked), peeked
    checkpoint = work / "spark-checkpoints" / "events-to-skiff"
    assert (checkpoint / "offsets").is_dir()
