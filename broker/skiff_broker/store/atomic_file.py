"""Replacing a small file so that a crash leaves either the old or the new content."""

from __future__ import annotations

import os

from .mapped_file import fsync_directory


def write_atomically(path: str, data: bytes) -> None:
    """Write to a temporary file, fsync it, rename it over ``path``, fsync the directory.

    Readers and a restart after a crash at any point see one whole version.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(directory)


def read_if_exists(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
