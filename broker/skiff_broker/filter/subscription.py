"""A subscription's filter as the readers use it: a tag hash set and exact checks.

Every reader (receive, pull, FIFO, long polling) asks the store for messages with
``tag_codes`` (consume-queue units whose tag hash is not in it are passed over without
reading the log; None: every unit), ``properties_check`` (a look at a record's raw
PROPERTIES field before anything else of it is decoded: False passes it over; None: no
such look) and ``accept`` (the exact check of each message read; None: every message
read). A tag filter has ``tag_codes`` and ``accept``; an SQL92 filter, whose properties
are in the log, not in the consume queue, has ``properties_check`` and ``accept``.

An SQL92 ``properties_check`` finds only the values of the properties its expression names
in the raw field (a byte search each; no body copy, no decode of the rest), and keeps the
verdict for each combination of values it met (``VERDICTS_KEPT`` of them): at 10%
matching, nine records in ten are passed over for those searches and a dictionary
look-up. It answers False only where ``accept`` would: both read the same pairs, the last
of a repeated name winning, text decoded the same way. (The store gives it only records
that agree with their units and whose lengths add up; any other is left to the full read,
which checks it.)

``sql92_filter`` compiles each distinct expression once and keeps the last
``COMPILED_LIMIT`` of them (those up to ``COMPILED_MAX_LENGTH`` characters), so a
consumer's every receive reuses its subscription's filter and its verdicts.

Invariant: a filter's expression never changes; ``accept(message)`` and
``properties_check(field)`` are pure (the verdicts kept cache a pure function).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Protocol

from ..wire.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from ..wire.record_codec import StoredMessage
from .sql92 import SqlFilter, compile_sql92

# Distinct SQL92 expressions kept compiled (RocketMQ's parser keeps 100), each at most
# this long, so that the cache holds a few MiB however large the expressions clients send.
COMPILED_LIMIT = 1024
COMPILED_MAX_LENGTH = 4096
# Verdicts one SQL92 subscription keeps, by the values of the properties it reads: enough for
# properties of a few hundred values each, small however many distinct ones arrive.
VERDICTS_KEPT = 4096

_PAIR_END = PROPERTY_SEPARATOR.encode()
_NAME_END = NAME_VALUE_SEPARATOR.encode()


class MessageFilter(Protocol):
    """What a reader needs of a subscription's filter (a ``TagFilter`` or an SQL92 one)."""

    @property
    def tag_codes(self) -> set[int] | None: ...

    @property
    def properties_check(self) -> Callable[[bytes], bool] | None: ...

    @property
    def accept(self) -> Callable[[StoredMessage], bool] | None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Sql92Subscription:
    """Messages whose properties the expression is TRUE for."""

    sql: SqlFilter
    # Per property the expression reads: its name, and the bytes before its value in a raw
    # PROPERTIES field, in a pair after the first and in the first.
    _needles: tuple[tuple[str, bytes, bytes], ...] = dataclasses.field(init=False, compare=False)
    # The values of those properties (None: missing) -> whether the expression is TRUE.
    _verdicts: dict[tuple[bytes | None, ...], bool] = dataclasses.field(
        init=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        needles = tuple(
            (name, _PAIR_END + name.encode() + _NAME_END, name.encode() + _NAME_END)
            for name in sorted(self.sql.properties)
        )
        object.__setattr__(self, "_needles", needles)

    @property
    def tag_codes(self) -> set[int] | None:
        return None

    @property
    def properties_check(self) -> Callable[[bytes], bool]:
        return self.field_matches

    @property
    def accept(self) -> Callable[[StoredMessage], bool]:
        matches = self.sql.matches
        return lambda message: matches(message.properties)

    def field_matches(self, field: bytes) -> bool:
        """Whether the expression is TRUE for the properties in ``field``, a record's raw
        PROPERTIES field."""
        values: list[bytes | None] = []
        for _, inner, first in self._needles:
            # Names and values hold neither separator's byte, so a separator, the name and
            # the name-value separator start a pair of that name; the last one wins.
            at = field.rfind(inner)
            if at >= 0:
                at += len(inner)
            elif field.startswith(first):
                at = len(first)
            else:
                values.append(None)
                continue
            end = field.find(_PAIR_END, at)
            values.append(field[at:] if end < 0 else field[at:end])
        key = tuple(values)
        verdict = self._verdicts.get(key)
        if verdict is None:
            properties = {
                name: value.decode("utf-8", "replace")
                for (name, _, _), value in zip(self._needles, key, strict=True)
                if value is not None
            }
            verdict = self.sql.matches(properties)
            if len(self._verdicts) < VERDICTS_KEPT:
                self._verdicts[key] = verdict
        return verdict


def sql92_filter(expression: str) -> Sql92Subscription:
    """The compiled subscription; ``SqlSyntaxError`` (a ValueError) if it does not parse."""
    if len(expression) > COMPILED_MAX_LENGTH:
        return Sql92Subscription(compile_sql92(expression))
    return _compiled(expression)


@functools.lru_cache(maxsize=COMPILED_LIMIT)
def _compiled(expression: str) -> Sql92Subscription:
    return Sql92Subscription(compile_sql92(expression))
