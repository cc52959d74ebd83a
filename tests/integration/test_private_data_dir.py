"""A broker's data directory is its user's alone, whatever the umask (real broker processes).

Messages and users' secrets live there: directories 0700 (2750 with --data-dir-group),
files 0600, and a start on a directory with looser modes tightens them with one line.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.broker_process import (
    SKIFF,
    broker_env,
    create_topics,
    data_dir_of,
    running_broker,
)

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.credentials import Credentials
from skiff_broker.metadata.topic_table import TopicConfig

ROOT = Credentials("root", "root-secret")
AUTH_ON = {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": "root:root-secret"}
SIGNED = {"SKIFF_ACCESS_KEY": ROOT.access_key, "SKIFF_SECRET_KEY": ROOT.secret_key}


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    """Processes started in the block inherit ``mask``."""
    before = os.umask(mask)
    try:
        yield
    finally:
        os.umask(before)


def modes(root: Path) -> dict[str, int]:
    """Every path under ``root`` (``root`` itself as ".") and its permission bits."""
    found = {".": stat.S_IMODE(root.lstat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def loose(root: Path, directory_mode: int = 0o700) -> dict[str, str]:
    """Paths whose mode is not the private one, with their mode in octal."""
    wrong = {}
    for name, mode in modes(root).items():
        # tls/ holds the self-signed certificate's key: its owner's alone in any case.
        wanted = (0o700 if name == "tls" else directory_mode) if (root / name).is_dir() else 0o600
        if mode != wanted:
            wrong[name] = f"{mode:o}"
    return wrong


def send(endpoint: str, body: str) -> None:
    done = subprocess.run(
        [*SKIFF, "send", "--topic", "orders", "--body", body, "--endpoint", endpoint],
        env=broker_env(SIGNED),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_under_umask_022_every_file_is_0600_and_every_directory_0700(tmp_path: Path) -> None:
    data_dir = data_dir_of(tmp_path)
    with umask(0o022):
        create_topics(data_dir, TopicConfig("orders", 2, 2))
        with running_broker(tmp_path, env=AUTH_ON) as broker:
            send(broker.endpoint, "secret message body")
            with AdminClient(broker.endpoint, credentials=ROOT) as admin:
                assert admin.apply_user("alice", "alice-secret")
                assert admin.apply_user("alice", "alice-new-secret")
            names = set(modes(data_dir))
            assert loose(data_dir) == {}
        # A clean stop writes the checkpoint and offsets again: private too.
        assert loose(data_dir) == {}
    # What the user would look for is there, so the check above covered it.
    for expected in (
        "lock",
        "checkpoint",
        "abort",
        "config/auth.json",
        "config/auth.json.bak",
        "config/topics.json",
        "commitlog",
        "consumequeue/orders",
        "index",
        "tls",
    ):
        assert expected in names, f"{expected} not in {sorted(names)}"
    assert any(name.startswith("commitlog/0") for name in names)
    assert any(name.startswith("consumequeue/orders/") for name in names)
    # The self-signed certificate and its key.
    assert any(name.startswith("tls/") for name in names)


def test_a_directory_with_loose_modes_is_tightened_at_start_with_one_line(
    tmp_path: Path,
) -> None:
    data_dir = data_dir_of(tmp_path)
    with umask(0o022):
        create_topics(data_dir, TopicConfig("orders", 2, 2))
        with running_broker(tmp_path, env=AUTH_ON) as broker:
            send(broker.endpoint, "before")
    # As an older Skiff (or a restored backup) left it: everyone may read and list.
    files = directories = 0
    for path in [data_dir, *data_dir.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
            directories += 1
        else:
            path.chmod(0o644)
            files += 1
    with umask(0o022), running_broker(tmp_path, env=AUTH_ON) as broker:
        lines = [r for r in broker.log_lines() if r["msg"].startswith("tightened ")]
        assert len(lines) == 1, lines
        assert lines[0]["level"] == "warning"
        assert lines[0]["msg"].startswith(f"tightened {files} file(s) and {directories} director")
        assert "files are now 0600, directories 700" in lines[0]["msg"]
        assert loose(data_dir) == {}
        send(broker.endpoint, "after")
    with umask(0o022), running_broker(tmp_path, env=AUTH_ON) as broker:
        assert not [r for r in broker.log_lines() if r["msg"].startswith("tightened ")]


def test_with_a_data_dir_group_directories_are_2750_of_that_group(tmp_path: Path) -> None:
    data_dir = data_dir_of(tmp_path)
    group = os.getegid()
    with umask(0o022):
        create_topics(data_dir, TopicConfig("orders", 2, 2))
        with running_broker(tmp_path, "--data-dir-group", str(group), env=AUTH_ON) as broker:
            send(broker.endpoint, "shared listing")
            assert loose(data_dir, directory_mode=0o2750) == {}
    for path in [data_dir, *data_dir.rglob("*")]:
        if path.is_dir() and path.name != "tls":
            assert path.stat().st_gid == group, path


def test_a_data_dir_group_the_user_is_not_in_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [
            *SKIFF,
            *("broker", "--data-dir", str(data_dir_of(tmp_path)), "--listen", "127.0.0.1:0"),
            *("--data-dir-group", "no-such-group-here"),
        ],
        env=broker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "--data-dir-group no-such-group-here: no such group" in done.stderr
    assert not data_dir_of(tmp_path).exists()
