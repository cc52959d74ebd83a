"""The ``skiff`` command as a user runs it: a real process, real signals."""

import json
import os
import signal
import subprocess
import sys
import time

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore

SKIFF = [sys.executable, "-m", "skiff_broker"]


def _env(**extra):
    # Metrics on a port of its own: 5557 may be another broker's on a shared machine.
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "SKIFF_METRICS_LISTEN": "127.0.0.1:0",
        "SKIFF_REMOTING_LISTEN": "127.0.0.1:0",
        **extra,
    }


def _wait_for_line(proc, needle, deadline=30.0):
    end = time.monotonic() + deadline
    seen = []
    while time.monotonic() < end:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} not logged; got: {''.join(seen)}")


def test_broker_takes_settings_from_env_and_stops_cleanly_on_sigterm(tmp_path):
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [*SKIFF, "broker"],
        env=_env(
            SKIFF_LISTEN="127.0.0.1:0",
            SKIFF_DATA_DIR=str(data),
            SKIFF_FLUSH_TYPE="SYNC_FLUSH",
            SKIFF_COMMIT_LOG_FILE_SIZE="1m",
            SKIFF_MAX_MESSAGE_SIZE="64k",
            SKIFF_INDEX_FILE_ENTRIES="1000",
        ),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = _wait_for_line(proc, "listening on")
        entries = [json.loads(line) for line in lines]  # not a TTY: JSON lines
        assert any("SYNC_FLUSH" in e["msg"] for e in entries)
        assert entries[-1]["msg"].startswith("listening on 127.0.0.1:")
        assert (data / "abort").exists()
        endpoint = entries[-1]["msg"].removeprefix("listening on ")
        with AdminClient(endpoint) as admin:
            admin.create_topic("env-settings")
        with MessagingClient(endpoint) as messaging:
            messaging.send([OutgoingMessage("env-settings", b"indexed", keys=("k1",))])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert not (data / "abort").exists(), "a clean stop removes the abort marker"
    segments = os.listdir(data / "commitlog")
    assert all(os.path.getsize(data / "commitlog" / s) == 1024 * 1024 for s in segments)
    # 40-byte header, a 4-byte hash slot per four keys, 20 bytes per key.
    indexes = os.listdir(data / "index")
    assert indexes
    assert all(os.path.getsize(data / "index" / f) == 40 + 250 * 4 + 1000 * 20 for f in indexes)


def test_invalid_settings_are_refused_with_a_reason(tmp_path):
    result = subprocess.run(
        [
            *SKIFF,
            "broker",
            "--data-dir",
            str(tmp_path),
            "--flush-type",
            "SYNC_FLUSH",
            "--transient-store-pool",
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "transient store pool works only with ASYNC_FLUSH" in result.stderr


def test_store_check_reports_a_corrupt_record(tmp_path):
    config = StoreConfig(str(tmp_path), commit_log_file_size=256 * 1024, max_message_size=64 * 1024)
    with MessageStore(config) as store:
        results = [store.put_message(Message("t", b"payload-%d" % i)) for i in range(50)]
    args = [
        *SKIFF,
        "store",
        "check",
        "--data-dir",
        str(tmp_path),
        "--commit-log-file-size",
        "256k",
        "--json",
    ]
    clean = subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=30)
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["records"] == 50

    victim = results[20].append.wrote_offset
    segment = tmp_path / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as f:
        f.seek(victim + 90)  # inside the body, which starts after the 88-byte header
        byte = f.read(1)
        f.seek(victim + 90)
        f.write(bytes([byte[0] ^ 0xFF]))
    broken = subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=30)
    assert broken.returncode == 1
    report = json.loads(broken.stdout)
    # The damaged record is skipped by recovery, not a reason to drop what follows.
    assert report["records"] == 49
    assert report["valid_end"] == results[-1].append.next_offset
    [damaged] = report["damaged"]
    assert damaged["offset"] == victim
    assert "CRC" in damaged["reason"]
