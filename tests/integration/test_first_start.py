"""A first `skiff broker`: laptop sizes, ports checked before the disk, a banner, old stores.

Real broker processes on loopback and real data directories. How fast the first start
is is measured by bench/first_start_bench.py, not asserted here.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
from tests.k8s.cluster_members import pull_all
from tests.support.broker_process import (
    SKIFF,
    BrokerProcess,
    broker_command,
    broker_env,
    create_topics,
    data_dir_of,
    launch_broker,
    running_broker,
)

from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.metadata.topic_table import TopicConfig

MiB = 1024**2
# What the issue asked of a first start on a laptop.
FOOTPRINT_LIMIT = 256 * 1000**2
# The launcher's small-file settings, unset: the broker's own defaults apply.
NO_SIZE_SETTINGS = {"SKIFF_CONSUME_QUEUE_FILE_ENTRIES": "", "SKIFF_INDEX_FILE_ENTRIES": ""}


def _disk_used(directory: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in directory.rglob("*") if p.is_file())


def _start_with_defaults(tmp_path: Path, *extra: str) -> BrokerProcess:
    """``skiff broker`` with no size option and no size setting in the environment."""
    command = [*SKIFF, "broker", "--data-dir", str(data_dir_of(tmp_path))]
    command += ["--listen", "127.0.0.1:0", *extra]
    return launch_broker(
        command, data_dir_of(tmp_path), tmp_path / "defaults.log", NO_SIZE_SETTINGS
    )


def _segment_sizes(data_dir: Path) -> set[int]:
    return {p.stat().st_size for p in (data_dir / "commitlog").iterdir() if p.name.isdigit()}


def test_a_first_start_takes_laptop_sizes_and_says_what_to_try(tmp_path):
    create_topics(data_dir_of(tmp_path), TopicConfig("demo", 8, 8))
    broker = _start_with_defaults(tmp_path)
    try:
        at_start = _disk_used(broker.data_dir)
        with MessagingClient(broker.endpoint, timeout=30) as client:
            client.send([OutgoingMessage("demo", b"first", keys=("k-1",))])
        after_first = _disk_used(broker.data_dir)
        (ready,) = [r["msg"] for r in broker.log_lines() if r["msg"].startswith("ready:")]
    finally:
        broker.stop()
    assert _segment_sizes(broker.data_dir) == {64 * MiB}
    assert at_start <= FOOTPRINT_LIMIT, at_start
    # The first message makes an index file and one queue's file, still within the limit.
    assert after_first <= FOOTPRINT_LIMIT, after_first
    # Not a terminal: the banner is one log line with the endpoint, the directory, a command.
    assert f"endpoint {broker.endpoint}" in ready
    assert f"data directory {broker.data_dir}" in ready
    assert f"skiff topic create demo --endpoint {broker.endpoint}" in ready


@pytest.fixture
def busy_port():
    """A port another process's socket listens on (here, the test's own)."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


@pytest.mark.parametrize("option", ["--listen", "--external-listen", "--ha-listen"])
def test_a_busy_port_is_named_before_the_store_is_touched(tmp_path, busy_port, option):
    command = broker_command(tmp_path, option, f"127.0.0.1:{busy_port}")
    done = subprocess.run(command, env=broker_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"Error: port {busy_port} on 127.0.0.1 is in use by another process; "
        f"pick another with {option} (or stop that process)"
    )
    # Nothing was written: no store, no certificate.
    assert not data_dir_of(tmp_path).exists()


def test_a_store_made_with_other_sizes_keeps_them(tmp_path):
    create_topics(data_dir_of(tmp_path), TopicConfig("demo", 2, 2))
    # Made with the launcher's 8 MiB segments and small index and queue files.
    with running_broker(tmp_path) as made, MessagingClient(made.endpoint, timeout=30) as client:
        client.send([OutgoingMessage("demo", b"kept", keys=("k-1",))])
    index_sizes = {p.stat().st_size for p in (made.data_dir / "index").iterdir()}

    broker = _start_with_defaults(tmp_path)
    try:
        with MessagingClient(broker.endpoint, timeout=30) as client:
            client.send([OutgoingMessage("demo", b"after", keys=("k-2",))])
        stored = pull_all(broker.endpoint, "demo", queues=2)
        kept = [r["msg"] for r in broker.log_lines() if r["msg"].startswith("the store keeps")]
    finally:
        broker.stop()
    assert sorted(stored.values()) == [b"after", b"kept"]
    assert _segment_sizes(broker.data_dir) == {8 * MiB}
    assert {p.stat().st_size for p in (broker.data_dir / "index").iterdir()} == index_sizes
    assert any(f"commit-log segment size of {8 * MiB}" in line for line in kept), kept

    # `skiff store check` reads the sizes from the files; a size that disagrees is an error.
    checked = subprocess.run(
        [*SKIFF, "store", "check", "--data-dir", str(broker.data_dir)],
        env=broker_env(NO_SIZE_SETTINGS),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"segments of {8 * MiB} bytes" in checked.stdout
    wrong = subprocess.run(
        [*SKIFF, "store", "check", "--data-dir", str(broker.data_dir)],
        env=broker_env({**NO_SIZE_SETTINGS, "SKIFF_COMMIT_LOG_FILE_SIZE": "64m"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrong.returncode == 1
    assert "Traceback" not in wrong.stderr
    assert "leave the option out and the size is read from the files" in wrong.stderr


def test_index_files_of_a_foreign_geometry_are_refused_with_what_to_do(tmp_path):
    data_dir = data_dir_of(tmp_path)
    (data_dir / "index").mkdir(parents=True)
    # 1000 bytes: no header, slots and entries add up to it.
    with open(data_dir / "index" / "20260101000000000", "wb") as odd:
        odd.truncate(1000)
    done = subprocess.run(
        broker_command(tmp_path), env=broker_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "start with the --index-file-entries and --index-hash-slots" in done.stderr
    assert os.path.getsize(data_dir / "index" / "20260101000000000") == 1000
