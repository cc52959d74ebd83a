"""A JSON state file under ``config/``, kept with a ``.bak`` of its last good version.

Invariants:

* Every write is atomic (a crash leaves the old or the new content, never a mix)
  and, before the new content replaces it, the current file becomes ``<file>.bak``
  if it was good (read whole or written by this process; otherwise, if it holds
  a JSON object); a damaged file never overwrites the ``.bak``. RocketMQ's ConfigManager
  keeps the same ``<file>.bak``.
* Reading takes the main file; when it is missing-but-backed-up, empty, not JSON,
  or of the wrong shape, the ``.bak`` is read instead with a WARNING naming both.
  The next write replaces the damaged main file and keeps the ``.bak`` as it was.
* When neither is usable the start fails with a ``StateFileError``: one line
  saying which file, what is wrong with it and its ``.bak``, and what to do. With
  ``discard_damaged`` the state starts empty instead, the damaged file is moved
  to ``<file>.damaged`` (nothing is deleted) and a WARNING says what is lost.
* Documents are read in RocketMQ's fastjson dialect too (bare integer keys) and
  written as strict JSON, which RocketMQ also reads.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..store.atomic_file import read_if_exists, write_atomically, write_with_backup
from . import fastjson_text

log = logging.getLogger(__name__)

T = TypeVar("T")

# What a parser raises for a document of the wrong shape.
SHAPE_ERRORS = (AttributeError, KeyError, TypeError, ValueError)


class StateFileError(ValueError):
    """A state file and its backup are both unusable; the message says what to do."""


class _Damaged(Exception):
    """Why one copy of a state file cannot be used (internal)."""


class StateFile:
    """One JSON state file; ``lost`` says in a few words what starting without it loses."""

    def __init__(self, path: str, *, lost: str, indent: int | None = 2) -> None:
        self.path = path
        # Tables people read (topics, offsets) are indented; bulky delivery state is not.
        self._indent = indent
        self.backup_path = f"{path}.bak"
        self.lost = lost
        self._lock = threading.RLock()
        # Whether the main file on disk is known good; None until read or written.
        self._main_good: bool | None = None

    # -- reading ------------------------------------------------------------

    def read(
        self, parse: Callable[[dict[str, Any]], T], *, discard_damaged: bool = False
    ) -> T | None:
        """The parsed document, from the main file or its ``.bak``; None if neither exists."""
        try:
            result = self._parse_copy(self.path, parse)
        except _Damaged as damage:
            main_problem = str(damage)
        else:
            if result is not None:
                self._main_good = True
                return result[0]
            main_problem = ""
        try:
            backup = self._parse_copy(self.backup_path, parse)
        except _Damaged as damage:
            backup_problem = str(damage)
            backup = None
        else:
            backup_problem = "" if backup is not None else "does not exist"
        if backup is not None:
            self._main_good = False
            log.warning(
                "%s %s; read its last good version from %s instead "
                "(changes made after that version are lost)",
                self.path,
                main_problem or "does not exist",
                self.backup_path,
            )
            return backup[0]
        if not main_problem and not os.path.exists(self.backup_path):
            return None  # neither exists: a new data directory
        # The main file damaged or gone, and its backup damaged or gone too.
        damaged = self.path if main_problem else self.backup_path
        if discard_damaged:
            self._set_aside(damaged)
            return None
        raise StateFileError(
            f"cannot start: {self.path} {main_problem or 'does not exist'}, and its backup "
            f"{self.backup_path} {backup_problem}. Restore {os.path.basename(self.path)} from a "
            f"backup of the data directory, or start with --discard-damaged-state to start "
            f"without {self.lost} (the damaged file is then kept as "
            f"{os.path.basename(damaged)}.damaged)"
        )

    def _parse_copy(self, path: str, parse: Callable[[dict[str, Any]], T]) -> tuple[T] | None:
        raw = read_if_exists(path)
        if raw is None:
            return None
        if not raw.strip():
            raise _Damaged("is empty")
        try:
            document = fastjson_text.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise _Damaged(f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except json.JSONDecodeError as exc:
            raise _Damaged(f"is not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(document, dict):
            raise _Damaged(f"holds a JSON {type(document).__name__}, not an object")
        try:
            return (parse(document),)
        except SHAPE_ERRORS as exc:
            raise _Damaged(f"has an entry of the wrong shape ({_describe(exc)})") from None

    def _set_aside(self, path: str) -> None:
        target = f"{path}.damaged"
        # An earlier damaged copy is kept too: nothing here is ever deleted.
        number = 0
        while os.path.exists(target):
            number += 1
            target = f"{path}.damaged.{number}"
        os.replace(path, target)
        self._main_good = None
        log.warning(
            "%s is damaged and so is its backup; started without %s as "
            "--discard-damaged-state asks (the damaged file is now %s)",
            self.path,
            self.lost,
            target,
        )

    # -- writing ------------------------------------------------------------

    def write(self, document: dict[str, Any]) -> None:
        """Replace the file atomically, keeping the version it replaces as ``.bak`` if good."""
        data = json.dumps(document, indent=self._indent, sort_keys=True).encode()
        with self._lock:
            if self._main_good is None:
                self._main_good = self._main_is_json_object()
            if self._main_good:
                write_with_backup(self.path, data, self.backup_path)
            else:
                write_atomically(self.path, data)
            self._main_good = True

    def _main_is_json_object(self) -> bool:
        raw = read_if_exists(self.path)
        if not raw:
            return False
        try:
            return isinstance(fastjson_text.loads(raw.decode("utf-8")), dict)
        except ValueError:
            return False


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}" if exc.args else "missing field"
    return str(exc) or type(exc).__name__
