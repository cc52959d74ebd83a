"""Replacing a small file so that a crash leaves either the old or the new content.

Every version written is ``FILE_MODE`` (0600: state files hold secrets), whatever the umask.
"""

from __future__ import annotations

import contextlib
import os

from .mapped_file import fsync_directory
from .private_files import FILE_MODE


def write_atomically(path: str, data: bytes) -> None:
    """Write to a temporary file, fsync it, rename it over ``path``, fsync the directory.

    Readers and a restart after a crash at any point see one whole version.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = _write_temporary(path, data)
    os.replace(tmp, path)
    fsync_directory(directory)


def write_with_backup(path: str, data: bytes, backup_path: str) -> None:
    """As :func:`write_atomically`, and the version replaced becomes ``backup_path``.

    The old version is hard-linked as the backup before the new one is renamed
    over ``path``: at every instant ``path`` holds a whole version, and the
    backup holds the previous one (or, after a crash in between, the current one).
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = _write_temporary(path, data)
    if os.path.exists(path):
        link = f"{backup_path}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(link)
        try:
            os.link(path, link)
        except OSError:
            # A filesystem without hard links: copy the old version instead.
            with open(path, "rb") as f:
                _write_temporary(backup_path, f.read())
        os.replace(link, backup_path)
    os.replace(tmp, path)
    fsync_directory(directory)


def _write_temporary(path: str, data: bytes) -> str:
    """``data`` in ``<path>.tmp``, on disk; returns that name."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        # A leftover temporary file keeps its mode through O_CREAT: set it.
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def read_if_exists(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
