"""Reading JSON as Apache RocketMQ writes it with fastjson.

fastjson writes the keys of a ``Map<Integer, …>`` bare: ``{"offsetTable":
{"orders@readers":{0:12,1:7}}}`` in ``consumerOffset.json``, ``{1:0,2:5}`` in
``delayOffset.json``. Python's ``json`` refuses that, so before decoding, an
integer that stands where an object key goes (after ``{`` or ``,``, before
``:``, outside any string) is put in quotes. Strict JSON passes through
unchanged: every document Skiff writes is strict JSON, and fastjson reads quoted
integer keys back into ``Map<Integer, …>`` (it casts the string key to the map's
key type), so RocketMQ can read what Skiff writes.
"""

from __future__ import annotations

import json
from typing import Any

_DIGITS = frozenset("0123456789")


def loads(text: str) -> Any:
    """Decode strict JSON or fastjson's dialect with bare integer keys."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        quoted = quote_bare_integer_keys(text)
        if quoted == text:
            raise
        return json.loads(quoted)


def quote_bare_integer_keys(text: str) -> str:
    out: list[str] = []
    i = 0
    n = len(text)
    in_string = False
    # True right after "{" or "," outside strings (whitespace skipped): a key may start.
    key_may_start = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_string = False
            i += 1
            continue
        if ch == '"':
            in_string = True
            key_may_start = False
        elif ch in "{,":
            key_may_start = True
        elif ch in " \t\r\n":
            pass
        elif key_may_start and (ch in _DIGITS or ch == "-"):
            end = i + 1
            while end < n and text[end] in _DIGITS:
                end += 1
            after = end
            while after < n and text[after] in " \t\r\n":
                after += 1
            if after < n and text[after] == ":" and text[i:end] != "-":
                out.append(f'"{text[i:end]}"')
                i = end
                key_may_start = False
                continue
            key_may_start = False
        else:
            key_may_start = False
        out.append(ch)
        i += 1
    return "".join(out)
