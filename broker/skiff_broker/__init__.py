"""Skiff: a RocketMQ-compatible message broker.

The version has one source, the ``skiff-broker`` distribution's metadata (pyproject's
``version``); a source checkout that is not installed under that name reads pyproject.
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import tomllib

DISTRIBUTION = "skiff-broker"


def _version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pyproject = pathlib.Path(__file__).resolve().parents[2] / "pyproject.toml"
        try:
            return tomllib.loads(pyproject.read_text())["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


__version__ = _version()
