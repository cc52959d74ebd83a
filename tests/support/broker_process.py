"""A real broker process for integration tests.

``running_broker(tmp_path, *extra_args)`` starts ``python -m skiff_broker broker``
on 127.0.0.1 with a free port and the data directory ``tmp_path / "data"``, waits
for its "listening on" log line and yields a handle. Every test broker runs with
asyncio's slow-callback report (``--slow-callback-report-ms``); ``running_broker``
fails the test when a call that may block (``MAY_BLOCK_METHODS``) held the loop past
it. Starting it again with the same ``tmp_path`` reopens the same data directory,
which is how restarts are tested. The broker's stderr goes to a log file under
``tmp_path`` (a pipe could fill up and block it); a failure message includes its tail.

Import it as ``tests.support.broker_process``: the suite runs as ``python -m pytest`` from
the repository root, which puts the root on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from skiff_broker.assembly.slow_callbacks import SLOW_CALLBACK_FIELD
from skiff_broker.metadata.topic_table import TopicConfig, TopicTable

SKIFF = [sys.executable, "-m", "skiff_broker"]
# Small segments: the tests write little and each segment is pre-allocated; it must
# hold the default 4 MiB message limit. ``skiff store check`` needs the same value.
COMMIT_LOG_FILE_SIZE = "8m"
# Generous: a cold interpreter plus store recovery on a busy CI machine.
START_DEADLINE_S = 60.0
STOP_DEADLINE_S = 60.0

_log_numbers = itertools.count()


# Pre-allocated consume-queue and index files small enough that the dozens of
# brokers a run starts do not take tens of gigabytes of disk.
SMALL_FILES_ENV = {
    "SKIFF_CONSUME_QUEUE_FILE_ENTRIES": "50000",
    "SKIFF_INDEX_FILE_ENTRIES": "100000",
}


# A callback that holds a test broker's event loop longer is reported in its log.
SLOW_CALLBACK_REPORT_MS = "100"

# The calls whose handlers would wait for the disk or the replicas if they ran on the
# event loop (a dead-letter move, state files written with fsync, look-ups reading the
# index): a slow callback of one of these fails the test. Only these: on this loaded
# 2-core machine, callbacks that block on nothing crossed 100 ms too (a 500-message
# SendMessage 104-252 ms, a ReceiveMessage 127 ms, QueryRoute 110 ms, the HTTP/2 flush
# 146-197 ms, trivial admin calls 102-112 ms), which would fail tests at random.
MAY_BLOCK_METHODS = frozenset(
    {
        "/apache.rocketmq.v2.MessagingService/ForwardMessageToDeadLetterQueue",
        *(
            f"/skiff.admin.v1.AdminService/{method}"
            for method in (
                "CreateTopic",
                "UpdateTopic",
                "DeleteTopic",
                "ApplyUser",
                "DeleteUser",
                "ApplyAcl",
                "DeleteAcl",
                "LookupMessage",
                "QueryMessagesByKey",
                "GetConsumerLag",
                "ListConsumerGroups",
                "DescribeConsumerGroup",
                "ResetConsumerGroupOffsets",
                "DeleteConsumerGroup",
            )
        ),
    }
)
_TASK_NAME = re.compile(r"<Task \w+ name='([^']*)'")

# Every test broker serves or follows replication, which needs the group's secret.
HA_SECRET = "secret-shared-by-the-test-brokers"
# For a broker whose receives ask for invisible times under the default minimum (10 s),
# so that tests of redelivery wait seconds, not tens of seconds.
SHORT_INVISIBLE_ARGS = ("--min-invisible-time", "1")


def broker_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test's environment, with this interpreter's import path for the child."""
    return {
        **os.environ,
        **SMALL_FILES_ENV,
        "SKIFF_HA_SECRET": HA_SECRET,
        # Several brokers run at once: each serves its metrics on a port of its own.
        "SKIFF_METRICS_LISTEN": "127.0.0.1:0",
        # ... and its remoting port too (the default, 8080, would collide).
        "SKIFF_REMOTING_LISTEN": "127.0.0.1:0",
        # asyncio's debug report of callbacks holding the broker's event loop.
        "SKIFF_SLOW_CALLBACK_REPORT_MS": SLOW_CALLBACK_REPORT_MS,
        "PYTHONPATH": os.pathsep.join(sys.path),
        **(extra or {}),
    }


def data_dir_of(tmp_path: Path) -> Path:
    return tmp_path / "data"


def create_topics(data_dir: Path, *topics: TopicConfig) -> None:
    """Write topics into ``config/topics.json`` before the broker starts."""
    table = TopicTable(str(data_dir / "config" / "topics.json"))
    table.load()
    for topic in topics:
        table.put(topic)


@dataclasses.dataclass
class BrokerProcess:
    proc: subprocess.Popen
    data_dir: Path
    log_path: Path
    endpoint: str = ""
    # Where RocketMQ 4.x clients reach it (namesrvAddr), 127.0.0.1:PORT; empty if off.
    remoting_endpoint: str = ""
    # Where a master serves replication (empty for a replica).
    ha_endpoint: str = ""
    # http://127.0.0.1:PORT/metrics, its Prometheus endpoint.
    metrics_url: str = ""
    # The command line it was started with, to start it again the same way.
    command: list[str] = dataclasses.field(default_factory=list)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_lines(self) -> list[dict]:
        """The JSON log records written so far (stderr is not a TTY, so JSON lines)."""
        records = []
        for line in self.log().splitlines():
            with contextlib.suppress(ValueError):
                records.append(json.loads(line))
        return records

    def slow_callbacks(self) -> list[str]:
        """What the broker reported holding its event loop past SLOW_CALLBACK_REPORT_MS
        in the calls of MAY_BLOCK_METHODS while serving (from its "listening on" line to
        its "stopping" line; start-up and the stop's last flush are left out).

        The log has every report, of any callback, for reading when a test is slow.
        """
        reports = []
        serving = False
        for record in self.log_lines():
            message = record.get("msg", "")
            if message.startswith("listening on "):
                serving = True
            elif message == "stopping":
                serving = False
            elif serving and SLOW_CALLBACK_FIELD in record:
                called = _TASK_NAME.search(message)
                if called is not None and called.group(1) in MAY_BLOCK_METHODS:
                    reports.append(message)
        return reports

    def assert_loop_never_held(self) -> None:
        """Fail if a call that may block held the broker's loop past SLOW_CALLBACK_REPORT_MS."""
        reports = self.slow_callbacks()
        assert not reports, (
            f"a call that may wait for the disk or the replicas held the broker's event loop "
            f"past {SLOW_CALLBACK_REPORT_MS} ms (run its blocking part off the loop):\n"
            + "\n".join(reports)
        )

    def _tail(self) -> str:
        return self.log()[-4000:]

    def stop(self) -> None:
        """SIGTERM, and the broker must exit 0 (a clean stop)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"broker did not stop on SIGTERM; log:\n{self._tail()}") from None
        assert code == 0, f"broker exited with {code}; log:\n{self._tail()}"

    def kill(self) -> None:
        """SIGKILL: a crash; nothing in the broker runs after it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def _wait_listening(self) -> None:
        end = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < end:
            for record in self.log_lines():
                message = record.get("msg", "")
                if message.startswith("serving replication on "):
                    port = message.rpartition(":")[2]
                    self.ha_endpoint = f"127.0.0.1:{port}"
                if message.startswith("remoting clients on "):
                    port = message.rpartition(":")[2]
                    self.remoting_endpoint = f"127.0.0.1:{port}"
                if message.startswith("metrics on "):
                    self.metrics_url = message.removeprefix("metrics on ")
                if message.startswith("listening on "):
                    address = message.removeprefix("listening on ")
                    port = address.rpartition(":")[2]
                    self.endpoint = f"127.0.0.1:{port}"
                    return
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"broker exited with {self.proc.returncode} before listening; "
                    f"log:\n{self._tail()}"
                )
            time.sleep(0.05)
        self.kill()
        raise AssertionError(f"broker did not start listening; log:\n{self._tail()}")


def broker_command(
    tmp_path: Path,
    *extra_args: str,
    launcher: Sequence[str] = SKIFF,
    ha_listen: str | None = "127.0.0.1:0",
) -> list[str]:
    """The command line :func:`start_broker` runs (options later in it win)."""
    return [
        *launcher,
        "broker",
        "--data-dir",
        str(data_dir_of(tmp_path)),
        "--listen",
        "127.0.0.1:0",
        "--commit-log-file-size",
        COMMIT_LOG_FILE_SIZE,
        # A master serves replication; several brokers run at once in tests.
        *(("--ha-listen", ha_listen) if ha_listen is not None else ()),
        *extra_args,
    ]


def start_broker(
    tmp_path: Path,
    *extra_args: str,
    env: Mapping[str, str] | None = None,
    launcher: Sequence[str] = SKIFF,
    ha_listen: str | None = "127.0.0.1:0",
) -> BrokerProcess:
    """Start a broker; the caller must stop() or kill() it (prefer ``running_broker``).

    ``launcher`` is the command that takes the ``skiff`` arguments (``broker ...``).
    ``ha_listen`` None: no --ha-listen, so a MASTER serves no replication.
    """
    log_path = tmp_path / f"broker-{next(_log_numbers)}.log"
    command = broker_command(tmp_path, *extra_args, launcher=launcher, ha_listen=ha_listen)
    return launch_broker(command, data_dir_of(tmp_path), log_path, env)


def launch_broker(
    command: list[str], data_dir: Path, log_path: Path, env: Mapping[str, str] | None = None
) -> BrokerProcess:
    """Run ``command``, a whole ``skiff broker`` line, and wait until it listens.

    Its output goes to ``log_path``, which must not hold an earlier broker's lines.
    """
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            command,
            env=broker_env(env),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
        )
    broker = BrokerProcess(proc, data_dir, log_path, command=command)
    try:
        broker._wait_listening()
    except BaseException:
        broker.kill()
        raise
    return broker


@contextlib.contextmanager
def running_broker(
    tmp_path: Path,
    *extra_args: str,
    env: Mapping[str, str] | None = None,
    launcher: Sequence[str] = SKIFF,
) -> Iterator[BrokerProcess]:
    """A broker for the ``with`` block; stopped cleanly at its end if still running."""
    broker = start_broker(tmp_path, *extra_args, env=env, launcher=launcher)
    try:
        yield broker
    except BaseException:
        broker.kill()
        raise
    if broker.proc.poll() is None:
        broker.stop()
    broker.assert_loop_never_held()


@contextlib.contextmanager
def killed_afterwards() -> Iterator[list[BrokerProcess]]:
    """A list for the brokers a test starts; every one is killed when the block ends."""
    started: list[BrokerProcess] = []
    try:
        yield started
    finally:
        for broker in started:
            broker.kill()
