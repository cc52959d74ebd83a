"""The small things a new user meets first: versions, a missing extra, and `skiff send`.

Real processes throughout: the commands run as a user runs them, against a real broker.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from tests.support.broker_process import (
    SKIFF,
    broker_env,
    create_topics,
    data_dir_of,
    running_broker,
)
from tests.support.waiting import wait_for

from skiff_broker.client.admin import AdminClient
from skiff_broker.metadata.topic_table import MessageType, Permission, TopicConfig

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = [sys.executable, "-m", "skiff_operator"]
# Runs a command's module with kopf absent, as after `pip install skiff-broker` alone.
WITHOUT_KOPF = [
    sys.executable,
    "-c",
    "import runpy, sys; sys.modules['kopf'] = None; sys.argv[0] = 'skiff-operator'; "
    "runpy.run_module('skiff_operator', run_name='__main__')",
]


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, env=broker_env(), capture_output=True, text=True, timeout=120, **kwargs
    )


def test_both_commands_print_the_distributions_one_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert _run([*SKIFF, "--version"]).stdout.strip() == f"skiff, version {version}"
    assert _run([*OPERATOR, "--version"]).stdout.strip() == f"skiff-operator, version {version}"


def test_the_operator_without_kopf_says_what_to_install():
    helped = _run([*WITHOUT_KOPF, "--help"])
    assert helped.returncode == 0, helped.stderr
    assert "Run the Skiff operator" in helped.stdout
    started = _run(WITHOUT_KOPF)
    assert started.returncode == 1
    assert "Traceback" not in started.stderr
    assert "pip install 'skiff-broker[operator]'" in started.stderr


@pytest.fixture
def broker(tmp_path):
    create_topics(
        data_dir_of(tmp_path),
        TopicConfig("demo", 4, 4),
        TopicConfig("orders", 4, 4, Permission.READ_WRITE, MessageType.FIFO),
    )
    with running_broker(tmp_path, "--max-message-size", "1k") as running:
        yield running


def test_send_names_the_queue_and_accepts_a_url_endpoint(broker):
    done = _run([*SKIFF, "send", "--topic", "demo", "--body", "hi", "--endpoint", broker.endpoint])
    assert done.returncode == 0, done.stderr
    match = re.fullmatch(r"sent (\S+) to demo \(queue (\d), queue offset 0\)\n", done.stdout)
    assert match, done.stdout
    with AdminClient(broker.endpoint) as admin:
        offsets = {q.queue_id: q.max_offset for q in admin.queue_offsets("demo")}
    assert offsets[int(match[2])] == 1
    url = f"http://{broker.endpoint}/"
    done = _run([*SKIFF, "send", "--topic", "demo", "--body", "hi", "--endpoint", url])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sent ")


def test_refused_sends_name_the_option_that_fixes_them(broker):
    fifo = _run([*SKIFF, "send", "--topic", "orders", "--body", "x", "--endpoint", broker.endpoint])
    assert fifo.returncode == 1
    assert "give the message a --message-group" in fifo.stderr
    large = _run(
        [*SKIFF, "send", "--topic", "demo", "--body", "x" * 2000, "--endpoint", broker.endpoint]
    )
    assert large.returncode == 1
    assert "message body cannot exceed the max 1024" in large.stderr
    assert "a larger --max-message-size" in large.stderr


def test_ctrl_c_during_send_says_how_many_were_stored(broker):
    sender = subprocess.Popen(
        [*SKIFF, "send", "--topic", "demo", "--endpoint", broker.endpoint],
        env=broker_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert sender.stdin is not None
    sender.stdin.write("".join(f"line {i}\n" for i in range(200)))
    sender.stdin.flush()

    def stored() -> int:
        with AdminClient(broker.endpoint) as admin:
            return sum(q.max_offset for q in admin.queue_offsets("demo"))

    wait_for(lambda: stored() >= 200, "the first lines to be stored")
    # stdin stays open: the command waits for more lines when Ctrl-C comes.
    sender.send_signal(signal.SIGINT)
    # Not communicate(): it closes stdin at once, and an end of input that the command
    # reads before Python runs its SIGINT handler would end the send normally.
    sender.wait(timeout=60)
    assert sender.stderr is not None
    err = sender.stderr.read()
    assert sender.returncode == 130, err
    assert "Traceback" not in err
    # Stored and answered, plus sent and not yet answered: every line read.
    counted = re.search(r"interrupted: (\d+) messages? stored in demo(?:; (\d+) more sent)?", err)
    assert counted, err
    assert int(counted[1]) > 0
    assert int(counted[1]) + int(counted[2] or 0) == 200


def test_auto_created_topics_take_the_default_queue_counts(tmp_path):
    # What the operator renders from a Broker's defaultReadQueues/defaultWriteQueues.
    env = {"SKIFF_DEFAULT_READ_QUEUES": "3", "SKIFF_DEFAULT_WRITE_QUEUES": "2"}
    with running_broker(tmp_path, "--auto-create-topics", env=env) as broker:
        done = _run(
            [*SKIFF, "send", "--topic", "fresh", "--body", "x", "--endpoint", broker.endpoint]
        )
        assert done.returncode == 0, done.stderr
        with AdminClient(broker.endpoint) as admin:
            topic = admin.get_topic("fresh")
    assert (topic.read_queues, topic.write_queues) == (3, 2)
