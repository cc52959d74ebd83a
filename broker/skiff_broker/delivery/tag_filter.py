"""Tag filter expressions: ``*`` (everything) or ``TagA || TagB``.

The consume queue's tag hash rules out most other messages without reading
them; the exact tag is then checked, since different tags can share a hash.
"""

from __future__ import annotations

import dataclasses

from ..store.hashing import tag_hash
from ..store.message import StoredMessage


@dataclasses.dataclass(frozen=True, slots=True)
class TagFilter:
    tags: frozenset[str] | None  # None: every message

    @classmethod
    def parse(cls, expression: str) -> TagFilter:
        text = expression.strip()
        if not text or text == "*":
            return cls(None)
        tags = frozenset(part.strip() for part in text.split("||") if part.strip())
        if not tags:
            raise ValueError(f"tag expression {expression!r} names no tag; use '*' or 'A || B'")
        return cls(tags)

    @property
    def tag_codes(self) -> set[int] | None:
        return None if self.tags is None else {tag_hash(t) for t in self.tags}

    def accepts(self, message: StoredMessage) -> bool:
        return self.tags is None or message.tags in self.tags
