"""Tag filters (expressions parsed by ``wire/tag_expression.py``) applied to stored messages.

The consume queue's tag hash rules out most other messages without reading
them; the exact tag is then checked, since different tags can share a hash.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..store.hashing import tag_hash
from ..store.message import StoredMessage
from ..wire.tag_expression import parse_tag_expression


@dataclasses.dataclass(frozen=True, slots=True)
class TagFilter:
    tags: frozenset[str] | None  # None: every message

    @classmethod
    def parse(cls, expression: str) -> TagFilter:
        return cls(parse_tag_expression(expression))

    @property
    def tag_codes(self) -> set[int] | None:
        return None if self.tags is None else {tag_hash(t) for t in self.tags}

    @property
    def properties_check(self) -> Callable[[bytes], bool] | None:
        """None: the consume queue's tag hash already does what a look at the record would."""
        return None

    @property
    def accept(self) -> Callable[[StoredMessage], bool] | None:
        """The exact check of a message read; None when every message is wanted."""
        return None if self.tags is None else self.accepts

    def accepts(self, message: StoredMessage) -> bool:
        return self.tags is None or message.tags in self.tags
