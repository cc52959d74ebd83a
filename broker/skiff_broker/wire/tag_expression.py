"""Tag filter expressions, as consumers write them: ``*`` (everything) or ``TagA || TagB``.

One parser for the broker's filters and the clients' own checks, so both read an
expression alike.
"""

from __future__ import annotations


def parse_tag_expression(expression: str) -> frozenset[str] | None:
    """The tags ``expression`` names; None for every message. ValueError if it names none."""
    text = expression.strip()
    if not text or text == "*":
        return None
    tags = frozenset(part.strip() for part in text.split("||") if part.strip())
    if not tags:
        raise ValueError(f"tag expression {expression!r} names no tag; use '*' or 'A || B'")
    return tags
