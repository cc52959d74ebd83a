"""A subscription's filter as the readers use it: a tag hash set and an exact check.

Every reader (receive, pull, FIFO, long polling) asks the store for messages with
``tag_codes`` (consume-queue units whose tag hash is not in it are passed over without
reading the log; None: every unit) and ``accept`` (the exact check of each message read;
None: every message read). A tag filter has both; an SQL92 filter has only ``accept``, since
its properties are in the log, not in the consume queue.

``sql92_filter`` compiles each distinct expression once and keeps the last
``COMPILED_LIMIT`` of them (those up to ``COMPILED_MAX_LENGTH`` characters), so a
consumer's every receive reuses its subscription's filter.

Invariant: a filter is immutable, and ``accept(message)`` is pure.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Protocol

from ..wire.record_codec import StoredMessage
from .sql92 import SqlFilter, compile_sql92

# Distinct SQL92 expressions kept compiled (RocketMQ's parser keeps 100), each at most
# this long, so that the cache holds a few MiB however large the expressions clients send.
COMPILED_LIMIT = 1024
COMPILED_MAX_LENGTH = 4096


class MessageFilter(Protocol):
    """What a reader needs of a subscription's filter (a ``TagFilter`` or an SQL92 one)."""

    @property
    def tag_codes(self) -> set[int] | None: ...

    @property
    def accept(self) -> Callable[[StoredMessage], bool] | None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Sql92Subscription:
    """Messages whose properties the expression is TRUE for."""

    sql: SqlFilter

    @property
    def tag_codes(self) -> set[int] | None:
        return None

    @property
    def accept(self) -> Callable[[StoredMessage], bool]:
        matches = self.sql.matches
        return lambda message: matches(message.properties)


def sql92_filter(expression: str) -> Sql92Subscription:
    """The compiled subscription; ``SqlSyntaxError`` (a ValueError) if it does not parse."""
    if len(expression) > COMPILED_MAX_LENGTH:
        return Sql92Subscription(compile_sql92(expression))
    return _compiled(expression)


@functools.lru_cache(maxsize=COMPILED_LIMIT)
def _compiled(expression: str) -> Sql92Subscription:
    return Sql92Subscription(compile_sql92(expression))
