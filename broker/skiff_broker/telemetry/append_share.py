"""A caller's share of an append made for several callers, observed as that caller's own.

The send coalescer puts the SendMessage calls of one loop turn into one store append.
A user still sees one append per call: each traced call gets its own
``skiff.store.append`` span, child of its own request's span, with its own message
count, queue and bytes, and every call one latency sample.

Invariants:

- A share is made in its caller's context (``StoreTelemetry.share``), when the call joins
  the batch: the only moment that context is at hand, since the batch is appended later
  from another task. An untraced caller (99 in 100 at the default ratio) gets the store's
  plain :class:`AppendShare`, which holds nothing but its place in the batch.
- A :class:`TracedShare` owns its span (opened when the batch is appended, under the
  caller's context), its latency sample and its part of the outcome: only its own
  records, their bytes and offsets (:func:`part_of`).
- The untraced shares of a batch waited for the same append: one record of as many
  samples counts them all (no object per untraced caller).
- The shared append names one group-commit waiter per share, in the batch's order: a
  traced share's span context, None for the others, so a flush links the callers it served.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from opentelemetry.context import Context

from ..store.commit_log import AppendResult
from ..store.message import Message
from ..store.observer import AppendScope, AppendShare
from ..store.results import PutResult


class AppendScopes(Protocol):
    """The scopes a shared append is observed with (``StoreTelemetry`` provides them)."""

    def traced_scope(
        self, topic: str, queue_id: int | None, count: int, flush_type: str, parent: Context
    ) -> AppendScope | None:
        """A scope with a span under ``parent``, None if the sampler records none."""

    def timed_scope(self, topic: str, flush_type: str, samples: int) -> AppendScope | None:
        """A scope recording ``samples`` latency samples per outcome; None without histograms."""


def part_of(result: PutResult, first: int, count: int) -> PutResult:
    """What one caller of a shared append got: the outcome, with only its own records."""
    append = result.append
    if append is None:
        return result
    end = first + count
    physical = append.physical_offsets[first:end]
    sizes = append.sizes[first:end]
    share = AppendResult(
        wrote_offset=physical[0] if physical else append.wrote_offset,
        wrote_bytes=sum(sizes),
        store_timestamp=append.store_timestamp,
        physical_offsets=physical,
        queue_offsets=append.queue_offsets[first:end],
        sizes=sizes,
    )
    return PutResult(result.status, result.reason, share)


def _queue_of(messages: Sequence[Message]) -> int | None:
    """The one queue of ``messages``, None when they span several."""
    if not messages:
        return None
    queue_id = messages[0].queue_id
    return queue_id if all(m.queue_id == queue_id for m in messages) else None


class TracedShare(AppendShare):
    """A traced caller's share: its context until the batch is appended, then its own
    append scope (span and latency sample), told only its part of the outcome."""

    __slots__ = ("_parent", "_scope")

    def __init__(self, first: int, count: int, parent: Context) -> None:
        super().__init__(first, count)
        self._parent: Context | None = parent
        self._scope: AppendScope | None = None

    def open(
        self, scopes: AppendScopes, topic: str, messages: Sequence[Message], flush_type: str
    ) -> bool:
        """Start this share's span in ``messages`` (the whole batch); False if not sampled."""
        parent, self._parent = self._parent, None
        if parent is None:  # opened before: a share belongs to one append
            return self._scope is not None
        own = messages[self.first : self.first + self.count]
        self._scope = scopes.traced_scope(topic, _queue_of(own), self.count, flush_type, parent)
        return self._scope is not None

    @property
    def context(self) -> Any:
        return self._scope.context if self._scope is not None else None

    def done(self, result: PutResult, started: float) -> None:
        if self._scope is not None:
            self._scope.done(part_of(result, self.first, self.count), started)

    def failed(self, error: BaseException, started: float) -> None:
        if self._scope is not None:
            self._scope.failed(error, started)


class SharedAppend(AppendScope):
    """One append for several callers, observed as each caller's own."""

    __slots__ = ("_timed", "_tokens", "_traced")

    def __init__(
        self,
        scopes: AppendScopes,
        topic: str,
        shares: Sequence[AppendShare],
        messages: Sequence[Message],
        flush_type: str,
    ) -> None:
        traced: list[TracedShare] = []
        tokens: list[Any] = []
        for share in shares:
            if type(share) is TracedShare and share.open(scopes, topic, messages, flush_type):
                traced.append(share)
                tokens.append(share.context)
            else:
                tokens.append(None)
        self._traced = traced
        self._tokens = tokens
        untraced = len(shares) - len(traced)
        self._timed = scopes.timed_scope(topic, flush_type, untraced) if untraced else None

    def waiters(self) -> Sequence[Any]:
        return self._tokens

    def done(self, result: Any, started: float) -> None:
        if self._timed is not None:
            self._timed.done(result, started)
        for share in self._traced:
            share.done(result, started)

    def failed(self, error: BaseException, started: float) -> None:
        if self._timed is not None:
            self._timed.failed(error, started)
        for share in self._traced:
            share.failed(error, started)
