"""A JSON document under ``config/`` that is replaced atomically on every persist."""

from __future__ import annotations

import json
import threading
from typing import Any

from ..store.atomic_file import read_if_exists, write_atomically


class ConfigFileError(ValueError):
    """A config file exists but cannot be read."""


class JsonConfigFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.RLock()

    def _read(self) -> dict[str, Any] | None:
        raw = read_if_exists(self.path)
        if raw is None:
            return None
        try:
            document = json.loads(raw)
        except ValueError as exc:
            raise ConfigFileError(
                f"{self.path} is not valid JSON ({exc}); restore it from a backup or remove it"
            ) from exc
        if not isinstance(document, dict):
            raise ConfigFileError(f"{self.path} must hold a JSON object")
        return document

    def _write(self, document: dict[str, Any]) -> None:
        write_atomically(self.path, json.dumps(document, indent=2, sort_keys=True).encode())
