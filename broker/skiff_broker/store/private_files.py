"""Who may read a data directory: the broker's own user only, or a group the user names.

The directory holds every message body and, in ``config/auth.json``, every user's
secret in plaintext, so:

* every file the broker writes under it is created ``0600`` (``FILE_MODE``), whatever
  the process umask, and the broker process runs with the umask ``umask_for`` gives,
  so nothing it creates there without an explicit mode is readable by others either;
* directories are ``0700``, or with ``--data-dir-group`` ``2750`` owned by that group
  (its members may list names and sizes, never read a file; set-group-ID so new
  directories take the group too), except ``tls/``, always ``0700`` (it holds a key);
* ``tighten`` at start brings what is already there to those modes (a directory
  written by an older Skiff, restored from a backup, or loosened by Kubernetes'
  ``fsGroup`` on each mount), changing only permission bits, never following a
  symbolic link. What it cannot change (not this user's) is reported, not fatal: what
  the broker writes inside stays private by its own modes.
"""

from __future__ import annotations

import dataclasses
import os
import stat

FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
GROUP_DIR_MODE = 0o2750
# Bits a file may have beyond the owner's.
_NOT_OWNERS = 0o077
# Directories (under the data directory) no group may list: the self-signed key's.
_ALWAYS_PRIVATE = ("tls",)
# How many paths a report names before it only counts the rest.
_NAMED_AT_MOST = 3


def umask_for(gid: int | None) -> int:
    """The process umask that keeps what it creates private (group-readable dirs with a group)."""
    return 0o027 if gid is not None else 0o077


def directory_mode(gid: int | None) -> int:
    return GROUP_DIR_MODE if gid is not None else PRIVATE_DIR_MODE


@dataclasses.dataclass(slots=True)
class Tightened:
    """What ``tighten`` changed, and what it could not change."""

    files: int = 0
    directories: int = 0
    # Paths left as they were (not this user's), the first few named.
    left: int = 0
    left_named: list[str] = dataclasses.field(default_factory=list)

    @property
    def changed(self) -> int:
        return self.files + self.directories

    def leave(self, path: str) -> None:
        self.left += 1
        if len(self.left_named) < _NAMED_AT_MOST:
            self.left_named.append(path)

    def left_text(self) -> str:
        rest = self.left - len(self.left_named)
        named = ", ".join(self.left_named)
        return f"{named} and {rest} more" if rest > 0 else named


def tighten(data_dir: str, gid: int | None = None) -> Tightened:
    """Bring ``data_dir`` and everything under it to the modes above; what it did."""
    result = Tightened()
    always_private = {os.path.join(data_dir, name) for name in _ALWAYS_PRIVATE}
    # Links to directories are listed but not entered; links to files are skipped below.
    for directory, _, files in os.walk(data_dir, followlinks=False):
        if directory in always_private:
            _tighten_directory(directory, PRIVATE_DIR_MODE, None, result)
        else:
            _tighten_directory(directory, directory_mode(gid), gid, result)
        for name in files:
            _tighten_file(os.path.join(directory, name), result)
    return result


def _tighten_directory(path: str, wanted: int, gid: int | None, result: Tightened) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        return
    try:
        if gid is not None and st.st_gid != gid:
            os.chown(path, -1, gid, follow_symlinks=False)
            # chown clears the set-group-ID bit; the chmod below sets it again.
            st = os.lstat(path)
        if stat.S_IMODE(st.st_mode) != wanted:
            os.chmod(path, wanted)
            result.directories += 1
    except PermissionError:
        result.leave(path)


def _tighten_file(path: str, result: Tightened) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return  # a temporary file renamed meanwhile
    if not stat.S_ISREG(st.st_mode):
        return
    mode = stat.S_IMODE(st.st_mode)
    if not mode & _NOT_OWNERS:
        return
    try:
        os.chmod(path, mode & ~_NOT_OWNERS)
    except PermissionError:
        result.leave(path)
        return
    result.files += 1
