"""Human-readable output: aligned tables, times, and message bodies."""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Sequence
from typing import Any

import click


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[str(c) for c in headers], *[[_cell(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        bool(rows) and all(isinstance(row[i], int) for row in rows) for i in range(len(headers))
    ]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(row, widths, numeric, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    """``label  value`` lines with the values aligned."""
    width = max(len(label) for label, _ in pairs)
    return "\n".join(f"{label.ljust(width)}  {_cell(value)}".rstrip() for label, value in pairs)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    return str(value)


def time_text(ms: int, *, unset: str = "-") -> str:
    """UTC ISO 8601 with milliseconds; ``unset`` for 0 (a time never set)."""
    if ms <= 0:
        return unset
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def body_text(body: bytes) -> tuple[str, str]:
    """(text, encoding): the body as UTF-8 text when it is that, else base64."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), "base64"
    if any(ch < " " and ch not in "\t\n\r" for ch in text):
        return base64.b64encode(body).decode("ascii"), "base64"
    return text, "utf-8"


def shown_body(body: bytes) -> str:
    text, encoding = body_text(body)
    return text if encoding == "utf-8" else f"base64:{text}"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def echo_json(document: Any) -> None:
    click.echo(json.dumps(document, sort_keys=True))
