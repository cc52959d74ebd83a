"""How an error shows what a user sent: briefly, so every answer stays small.

Invariant: :func:`quoted` and :func:`shortened` show at most ``QUOTE_LIMIT``
characters of the input plus a note of how long it was, and :func:`bounded` is at most
``MESSAGE_LIMIT`` bytes of UTF-8. A gRPC error travels in a trailer that
clients cap (8 KiB by default), percent-encoded, so a name echoed whole (a
10 KiB topic name) would cost the client the answer itself.
"""

from __future__ import annotations

QUOTE_LIMIT = 64
MESSAGE_LIMIT = 1024
_CUT = "…"


def quoted(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``repr`` of ``text``, or of its first ``limit`` characters with its length noted."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}{_CUT} ({len(text)} characters)"


def shortened(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` as it is, or its first ``limit`` characters with its length noted."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}{_CUT} ({len(text)} characters)"


def bounded(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message``, cut to at most ``limit`` bytes of UTF-8 (whole characters)."""
    encoded = message.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return message
    room = limit - len(_CUT.encode())
    return encoded[:room].decode("utf-8", "ignore") + _CUT
