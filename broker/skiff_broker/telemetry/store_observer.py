"""The store's appends and flushes as OpenTelemetry spans and latency histograms.

One span per append batch (never one per message; a batch shared by coalesced calls is
one per call, see ``append_share``) and one per flush. An append
span is a child of whatever span is current when the store is called: in the
broker, the gRPC server span of the request. A flush runs on the flush thread,
so its span takes as parent the append span of the first traced appender it
served, and links to (some of) the others; a flush that served no traced
appender (every ASYNC_FLUSH flush) is a root span.

Cost matters: an append is a few microseconds of Python. With a parent-based
sampler an append under an unsampled parent creates no span at all, and every
append records one histogram sample into the broker's own aggregation
(``latency_histograms``), not the SDK's, through one scope that all the untraced
appends of a topic share (the store times the put): no object is made per append.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import ParentBased
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanKind, Status, StatusCode

from ..store.message import Message
from ..store.observer import AppendScope, AppendShare, FlushReport, StoreObserver
from ..store.results import PutStatus
from . import conventions as cv
from .append_share import SharedAppend, TracedShare
from .latency_histograms import FOLD_AT, ExplicitBucketHistogram, HistogramSet
from .root_sampling import RootSampling


class StoreTelemetry(StoreObserver):
    """Spans go to ``tracer_provider`` (None: no spans), latencies to ``histograms`` (None:
    not kept). ``roots``: the broker's ratio decision of new traces, when the provider's
    sampler and id generator are the ones it stands for (see ``root_sampling``): an
    append in its unsampled context is known by identity, and a flush that starts a
    trace of its own is decided without the SDK."""

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None,
        histograms: HistogramSet | None,
        broker_name: str,
        replication_mode: str = cv.REPLICATION_NONE,
        roots: RootSampling | None = None,
    ) -> None:
        self._tracer = tracer_provider.get_tracer(cv.STORE_SCOPE) if tracer_provider else None
        # Only then is a span under an unsampled parent certain to be dropped.
        self._follow_parent = isinstance(getattr(tracer_provider, "sampler", None), ParentBased)
        self._roots = roots if self._follow_parent else None
        self._unsampled = self._roots.unsampled if self._roots is not None else None
        self._append_seconds: ExplicitBucketHistogram | None = None
        self._flush_seconds: ExplicitBucketHistogram | None = None
        if histograms is not None:
            self._append_seconds = histograms.histogram(
                cv.APPEND_DURATION,
                unit="s",
                description="Time to append one call's batch to the commit log, including the "
                "wait for the disk under SYNC_FLUSH",
                bounds=cv.LATENCY_BUCKETS_S,
                # Broker and replication mode are the same for every point of a process:
                # they are resource attributes of the metrics (each label costs per sample).
                labels=(cv.TOPIC, cv.FLUSH_TYPE, cv.PUT_STATUS),
            )
            self._flush_seconds = histograms.histogram(
                cv.FLUSH_DURATION,
                unit="s",
                description="Time of one commit-log flush (fdatasync of the dirty pages)",
                bounds=cv.LATENCY_BUCKETS_S,
                labels=(cv.FLUSH_TYPE, cv.FLUSH_OUTCOME),
            )
        self._common = {cv.BROKER: broker_name, cv.REPLICATION_MODE: replication_mode}
        self._timed_scopes: dict[tuple[str, str], _TimedAppend] = {}

    # -- appends ------------------------------------------------------------

    def append(self, topic: str, queue_id: int | None, count: int, flush_type: str) -> AppendScope:
        parent = self.caller_token()
        if parent is not None:
            traced = self.traced_scope(topic, queue_id, count, flush_type, parent)
            if traced is not None:
                return traced
        timed = self._timed_scopes.get((topic, flush_type))  # _timed's common case, inline
        if timed is None:
            timed = self._timed(topic, flush_type)
        return timed or _UNOBSERVED

    def _timed(self, topic: str, flush_type: str) -> _TimedAppend | None:
        """The one scope of every untraced append of ``topic`` (a latency sample each);
        None when the histograms are not kept."""
        scope = self._timed_scopes.get((topic, flush_type))
        if scope is not None:
            return scope
        if self._append_seconds is None:
            return None
        scope = _TimedAppend(self._append_seconds, topic, flush_type)
        if len(self._timed_scopes) < _MAX_TIMED_SCOPES:
            self._timed_scopes[(topic, flush_type)] = scope
        return scope

    def timed_scope(self, topic: str, flush_type: str, samples: int) -> AppendScope | None:
        """A scope recording ``samples`` latency samples per outcome (the untraced callers
        of a shared append); None when the histograms are not kept."""
        if samples == 1:
            return self._timed(topic, flush_type)
        if self._append_seconds is None:
            return None
        return _TimedAppend(self._append_seconds, topic, flush_type, samples)

    def share(self, first: int, count: int) -> AppendShare:
        parent = self.caller_token()
        if parent is None:
            return AppendShare(first, count)
        return TracedShare(first, count, parent)

    def shared_append(
        self,
        topic: str,
        shares: Sequence[AppendShare],
        messages: Sequence[Message],
        flush_type: str,
    ) -> AppendScope:
        return SharedAppend(self, topic, shares, messages, flush_type)

    def caller_token(self) -> Context | None:
        """The caller's trace context, when its share of an append may be sampled."""
        if self._tracer is None:
            return None
        # The server's one unsampled context is known by identity: far cheaper for a
        # request than reading its span.
        current = otel_context.get_current()
        if current is self._unsampled:
            return None
        # Under an unsampled parent (every untraced request at the default ratio) the
        # sampler would say no: skip asking it.
        parent = trace.get_current_span(current).get_span_context()
        if self._follow_parent and parent.is_valid and not parent.trace_flags.sampled:
            return None
        return current

    def traced_scope(
        self,
        topic: str,
        queue_id: int | None,
        count: int,
        flush_type: str,
        parent: Context,
    ) -> _TracedAppend | None:
        """The append's scope with a span, if the sampler records one under ``parent``
        (the caller's ``caller_token``); None if not."""
        assert self._tracer is not None
        span = self._tracer.start_span(cv.APPEND_SPAN, context=parent, kind=SpanKind.INTERNAL)
        if not span.is_recording():
            return None
        # Attributes only once sampled: building them costs more than the decision.
        span.set_attributes(self._append_span_attributes(topic, queue_id, count, flush_type))
        return _TracedAppend(self._timed(topic, flush_type), span)

    def _append_span_attributes(
        self, topic: str, queue_id: int | None, count: int, flush_type: str
    ) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            **self._common,
            cv.MESSAGING_SYSTEM: "rocketmq",
            cv.FLUSH_TYPE: flush_type,
            cv.MESSAGE_COUNT: count,
        }
        if count:
            attributes[cv.TOPIC] = topic
            if queue_id is not None:
                attributes[cv.QUEUE_ID] = str(queue_id)
        return attributes

    # -- flushes ------------------------------------------------------------

    def flush_finished(self, report: FlushReport) -> None:
        outcome = "error" if report.error else "ok"
        if self._flush_seconds is not None:
            self._flush_seconds.record(report.duration_ns / 1e9, (report.flush_type, outcome))
        if self._tracer is None:
            return
        contexts = list(report.contexts)
        if contexts:
            parent = trace.set_span_in_context(NonRecordingSpan(contexts[0]))
        else:
            # Nobody traced waited for it (always so for ASYNC_FLUSH): a trace of its own,
            # mostly not sampled. Under SYNC_FLUSH with few producers there is a flush
            # for every few messages, and asking the SDK for a span that records nothing
            # cost a one-producer broker about a twelfth of its instructions.
            if self._roots is not None and self._roots.unsampled_context() is not None:
                return
            parent = Context()
        span = self._tracer.start_span(
            cv.FLUSH_SPAN,
            context=parent,
            kind=SpanKind.INTERNAL,
            links=[Link(c) for c in contexts[1:]],
            start_time=report.started_unix_ns,
        )
        # An untraced flush (every ASYNC_FLUSH one) is mostly not sampled: attributes only
        # once it is (the broker's samplers do not look at them).
        if not span.is_recording():
            return
        span.set_attributes(
            {
                **self._common,
                cv.FLUSH_TYPE: report.flush_type,
                cv.FLUSH_BYTES: report.flushed_bytes,
                cv.FLUSH_PAGES: report.pages,
                cv.FLUSH_WAITERS: report.waiters,
                cv.FLUSH_OUTCOME: outcome,
            }
        )
        if report.error:
            span.set_status(Status(StatusCode.ERROR, report.error))
        span.end(end_time=report.started_unix_ns + report.duration_ns)


_PUT_OK_STATUS = PutStatus.PUT_OK
_PUT_OK = _PUT_OK_STATUS.value
# An append neither traced nor timed.
_UNOBSERVED = AppendScope()
# Untraced appends share one scope per topic; past this many topics each gets its own.
_MAX_TIMED_SCOPES = 4096


class _TimedAppend(AppendScope):
    """Appends that only feed the latency histogram: one sample for each of ``samples``
    callers. It keeps nothing of any one append, so one serves all of a topic's."""

    __slots__ = ("_flush_type", "_histogram", "_ok_key", "_ok_samples", "_samples", "_topic")

    def __init__(
        self,
        histogram: ExplicitBucketHistogram,
        topic: str,
        flush_type: str,
        samples: int = 1,
    ) -> None:
        self._histogram = histogram
        self._topic = topic
        self._flush_type = flush_type
        self._samples = samples
        self._ok_key = (topic, flush_type, _PUT_OK)
        # The common outcome's point's list, once the point exists (no point appears
        # before its first sample): its samples then go straight into it.
        self._ok_samples: list[float] | None = None

    def done(self, result: Any, started: float) -> None:
        seconds = time.perf_counter() - started
        status = result.status
        if status is not _PUT_OK_STATUS:
            # An enum member's value is a Python-level property: only these outcomes read it.
            key = (self._topic, self._flush_type, status.value)
            self._histogram.record(seconds, key, self._samples)
            return
        ok_samples = self._ok_samples
        if ok_samples is not None:
            ok_samples.append(seconds)
            if len(ok_samples) >= FOLD_AT:
                self._histogram.fold(self._ok_key)
            return
        self._histogram.record(seconds, self._ok_key, self._samples)
        if self._samples == 1:
            self._ok_samples = self._histogram.samples(self._ok_key)

    def failed(self, error: BaseException, started: float) -> None:
        seconds = time.perf_counter() - started
        self._histogram.record(seconds, (self._topic, self._flush_type, "ERROR"), self._samples)


class _TracedAppend(AppendScope):
    """An append with a sampled span, and the topic's latency sample (``timed``) if the
    histograms are kept."""

    __slots__ = ("_span", "_timed")

    def __init__(self, timed: _TimedAppend | None, span: Span) -> None:
        self._timed = timed
        self._span = span

    @property
    def context(self) -> Any:
        return self._span.get_span_context()

    def done(self, result: Any, started: float) -> None:
        if self._timed is not None:
            self._timed.done(result, started)
        span = self._span
        status = result.status.value
        span.set_attribute(cv.PUT_STATUS, status)
        append = result.append
        span.set_attribute(cv.APPEND_BYTES, append.wrote_bytes if append is not None else 0)
        if not result.ok:
            span.set_status(Status(StatusCode.ERROR, result.reason or status))
        span.end()

    def failed(self, error: BaseException, started: float) -> None:
        if self._timed is not None:
            self._timed.failed(error, started)
        span = self._span
        span.set_attribute(cv.PUT_STATUS, "ERROR")
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()
