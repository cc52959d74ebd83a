"""Tightening a data directory: permission bits only, never through a symbolic link."""

from __future__ import annotations

import stat

from skiff_broker.store.private_files import tighten


def mode(path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_links_are_not_followed_and_owner_bits_are_kept(tmp_path):
    data = tmp_path / "data"
    (data / "config").mkdir(parents=True)
    outside = tmp_path / "shared.txt"
    outside.write_text("not the broker's")
    outside.chmod(0o644)
    (data / "config" / "link").symlink_to(outside)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (data / "linked-dir").symlink_to(elsewhere)
    read_only = data / "config" / "read-only"
    read_only.write_text("x")
    read_only.chmod(0o444)
    data.chmod(0o755)

    done = tighten(str(data))

    assert (done.files, done.directories, done.left) == (1, 2, 0)
    assert mode(outside) == 0o644 and mode(elsewhere) == 0o755
    # Only others' bits go: a file the owner may not write stays so.
    assert mode(read_only) == 0o400
    assert mode(data) == 0o700 and mode(data / "config") == 0o700
    assert tighten(str(data)).changed == 0
