"""Damaged state files and failed starts, with real broker processes.

With a good ``.bak`` a damaged ``config/*.json`` costs only what changed since
that version: the broker starts, says so in a WARNING and serves the .bak's
topics and positions. With both damaged the start fails with one line that
names the file and what to do, exits non-zero, and leaves the directory as it
was: no ``abort`` marker of its own, the lock free, so a second attempt says the
same thing. An ``abort`` left by an earlier crash stays for the next start.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from tests.support.broker_process import (
    COMMIT_LOG_FILE_SIZE,
    SKIFF,
    START_DEADLINE_S,
    broker_env,
    create_topics,
    data_dir_of,
    running_broker,
    start_broker,
)

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.errors import NotFound
from skiff_broker.client.pull_consumer import PullConsumer
from skiff_broker.metadata.topic_table import TopicConfig

GROUP = "state-readers"
FIRST, SECOND = "state-first", "state-second"
STATE_FILES = (
    "topics.json",
    "consumerOffset.json",
    "popState.json",
    "delayState.json",
    "transactionState.json",
)
DAMAGE = {"empty": b"", "corrupt": b'{"offsetTable": {"x@y": {"0": 1,'}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory two runs wrote: each state file's .bak holds the first run's state.

    Run one: topic FIRST, GROUP at offset 3 of FIRST queue 0. Run two: topic
    SECOND, GROUP at offset 7. Every state file is written in both runs.
    """
    root = tmp_path_factory.mktemp("state-template")
    create_topics(data_dir_of(root), TopicConfig(FIRST, 2, 2))
    for topic, offset in ((FIRST, 3), (SECOND, 7)):
        with running_broker(root) as broker:
            if topic == SECOND:
                with AdminClient(broker.endpoint) as admin:
                    admin.create_topic(SECOND, read_queues=2)
            with PullConsumer(broker.endpoint, group=GROUP) as consumer:
                consumer.commit_offset(FIRST, 0, offset)
        _touch_delivery_state(data_dir_of(root) / "config", offset)
    return root


def _touch_delivery_state(config: Path, run: int) -> None:
    """Pop, delay and transaction state as the broker writes them, once per run.

    Nothing in these runs pops, schedules or commits a transaction, so the files
    are written here in the broker's own shape (what it would persist) to give
    each a .bak; what they hold is covered by the delivery unit tests.
    """
    from skiff_broker.metadata.state_file import StateFile

    documents = {
        "popState.json": {"version": 1, "groups": {GROUP: {FIRST: {"1": {"next": run}}}}},
        "delayState.json": {"version": 1, "watermark": 0, "delivered": []},
        "transactionState.json": {"version": 1, "watermark": 0, "opScanFrom": 0, "checks": {}},
    }
    for name, document in documents.items():
        StateFile(str(config / name), lost="").write(document)


@pytest.fixture
def data(template: Path, tmp_path: Path) -> Path:
    shutil.copytree(data_dir_of(template), data_dir_of(tmp_path))
    return tmp_path


def failed_start(tmp_path: Path, *extra: str, listen: str = "127.0.0.1:0") -> tuple[int, str]:
    """Run ``skiff broker`` expecting it to give up; its exit code and stderr."""
    done = subprocess.run(
        [
            *SKIFF,
            "broker",
            "--data-dir",
            str(data_dir_of(tmp_path)),
            "--listen",
            listen,
            "--commit-log-file-size",
            COMMIT_LOG_FILE_SIZE,
            "--ha-listen",
            "127.0.0.1:0",
            *extra,
        ],
        env=broker_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=START_DEADLINE_S,
    )
    return done.returncode, done.stderr


def error_line(stderr: str) -> str:
    """The one line a failed start ends with; log records before it are JSON."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "the broker printed nothing"
    assert lines[-1].startswith("Error: "), stderr
    for line in lines[:-1]:
        json.loads(line)  # every other line is a log record, not a stray message
    return lines[-1]


def warnings_of(log_records: list[dict]) -> list[str]:
    return [r["msg"] for r in log_records if r.get("level") == "warning"]


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_damaged_topics_json_starts_from_its_bak(data, damage):
    config = data_dir_of(data) / "config"
    (config / "topics.json").write_bytes(damage)
    with running_broker(data) as broker, AdminClient(broker.endpoint) as admin:
        assert [t.name for t in admin.list_topics()] == [FIRST]
        with pytest.raises(NotFound):
            admin.get_topic(SECOND)  # created after the .bak's version: lost, as the log says
        warnings = warnings_of(broker.log_lines())
    assert any("topics.json.bak" in w for w in warnings), warnings
    # The broker's next write leaves the good .bak as it was.
    assert json.loads((config / "topics.json.bak").read_text())["topicConfigTable"].keys() == {
        FIRST
    }


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_damaged_consumer_offsets_start_from_their_bak(data, damage):
    (data_dir_of(data) / "config" / "consumerOffset.json").write_bytes(damage)
    with running_broker(data) as broker:
        with PullConsumer(broker.endpoint, group=GROUP) as consumer:
            assert consumer.committed_offset(FIRST, 0) == 3
        warnings = warnings_of(broker.log_lines())
    assert any("consumerOffset.json.bak" in w for w in warnings), warnings


@pytest.mark.parametrize("name", ["popState.json", "delayState.json", "transactionState.json"])
def test_damaged_delivery_state_starts_from_its_bak(data, name):
    (data_dir_of(data) / "config" / name).write_bytes(b"\x00\x00\x00")
    with running_broker(data) as broker, AdminClient(broker.endpoint) as admin:
        assert {t.name for t in admin.list_topics()} == {FIRST, SECOND}
        warnings = warnings_of(broker.log_lines())
    assert any(f"{name}.bak" in w for w in warnings), warnings


@pytest.mark.parametrize("name", STATE_FILES)
def test_file_and_bak_both_damaged_fail_with_one_line_and_leave_no_trace(data, name):
    data_dir = data_dir_of(data)
    (data_dir / "config" / name).write_bytes(b"")
    (data_dir / "config" / f"{name}.bak").write_bytes(b"{not json")
    before = sorted(p.name for p in data_dir.iterdir())

    code, stderr = failed_start(data)
    line = error_line(stderr)
    assert code != 0
    assert str(data_dir / "config" / name) in line and "is empty" in line
    assert f"{name}.bak is not valid JSON" in line
    assert "--discard-damaged-state" in line
    assert not (data_dir / "abort").exists()
    assert sorted(p.name for p in data_dir.iterdir()) == before

    # The lock was released: a second attempt meets the same problem, not "in use".
    code_again, stderr_again = failed_start(data)
    assert code_again != 0
    assert error_line(stderr_again) == line


def test_discard_damaged_state_starts_without_it_and_keeps_the_file(data):
    config = data_dir_of(data) / "config"
    (config / "consumerOffset.json").write_bytes(b"")
    (config / "consumerOffset.json.bak").write_bytes(b"")
    with running_broker(data, "--discard-damaged-state") as broker:
        with PullConsumer(broker.endpoint, group=GROUP) as consumer:
            assert consumer.committed_offset(FIRST, 0) is None
        warnings = warnings_of(broker.log_lines())
        with AdminClient(broker.endpoint) as admin:
            assert {t.name for t in admin.list_topics()} == {FIRST, SECOND}
    assert any("committed position" in w for w in warnings), warnings
    assert (config / "consumerOffset.json.damaged").exists()


def test_a_crash_marker_survives_a_failed_start(data):
    data_dir = data_dir_of(data)
    broker = start_broker(data)
    broker.kill()
    assert (data_dir / "abort").exists()
    (data_dir / "config" / "topics.json").write_bytes(b"")
    (data_dir / "config" / "topics.json.bak").write_bytes(b"")

    code, stderr = failed_start(data)
    assert code != 0
    assert "topics.json" in error_line(stderr)
    # The next start must still scan the log the crash may have torn.
    assert (data_dir / "abort").exists()


def test_a_busy_port_fails_with_one_line_and_leaves_no_abort(data):
    data_dir = data_dir_of(data)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, stderr = failed_start(data, listen=f"127.0.0.1:{port}")
        line = error_line(stderr)
        assert code != 0
        assert f"port {port} on 127.0.0.1 is in use by another process" in line
        assert not (data_dir / "abort").exists()
        code_again, stderr_again = failed_start(data, listen=f"127.0.0.1:{port}")
        # Refused for the port again, not for a data directory left locked.
        assert code_again != 0 and "data directory" not in stderr_again
        assert f"port {port} on 127.0.0.1 is in use" in error_line(stderr_again)
