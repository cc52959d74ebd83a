"""The trace-id ratio decision for requests that start a trace, made before any span exists.

Under the broker's default sampler (parent-based, trace-id ratio) a request without a
caller's trace context is a new trace, traced when its trace id falls under the ratio's
bound: at the default ratio 99 in 100 are not. Asking the SDK for such a span costs
several microseconds (sampler objects, the parent lookups of the parent-based sampler,
a span context) to get a span that records nothing; here the same decision is one
random draw and one comparison, and an unsampled request runs in a context made once.

Invariants:
- The decision is the SDK's own: a trace id is drawn as the SDK draws it (128 random bits
  from the ``random`` module) and sampled iff ``trace_id & TRACE_ID_LIMIT < bound``
  (``TraceIdRatioBased``), so the ratio holds.
- A sampled trace keeps the id it was decided on: the id is handed to the SDK through
  the provider's id generator (:class:`PresetTraceIds`), whose sampler then agrees, and
  the SDK builds, records and exports the span as before.
- An unsampled new trace is made current as one valid, unsampled span context that all
  of them share, so that what happens under it (the store's append) follows its
  decision. It is never recorded, exported or sent on, so no one can tell it apart from
  a span context of its own, which would cost the request a trace id, a span id and
  two objects more. Being one object, it is told apart by identity
  (:attr:`RootSampling.unsampled`): the store asks no more of an append made in it.
"""

from __future__ import annotations

import random
import threading

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, SpanContext


class PresetTraceIds(RandomIdGenerator):
    """Random ids, except that a thread can choose the next trace id it is given."""

    def __init__(self) -> None:
        # The event loop presets and the SDK takes on the same thread at once; the flush
        # thread's root spans must never take the loop's preset.
        self._preset = threading.local()

    def fresh_trace_id(self) -> int:
        """A random trace id, never a preset one."""
        return super().generate_trace_id()

    def preset(self, trace_id: int) -> None:
        self._preset.trace_id = trace_id

    def generate_trace_id(self) -> int:
        trace_id = getattr(self._preset, "trace_id", 0)
        if trace_id:
            self._preset.trace_id = 0
            return trace_id
        return super().generate_trace_id()


class RootSampling:
    """The ratio decision of traces that start at the broker (``ratio`` of them sampled)."""

    def __init__(self, ratio: float, ids: PresetTraceIds) -> None:
        self.ids = ids
        self._bound = TraceIdRatioBased(ratio).bound
        self._limit = TraceIdRatioBased.TRACE_ID_LIMIT
        unsampled_span = NonRecordingSpan(
            SpanContext(ids.fresh_trace_id(), ids.generate_span_id(), is_remote=False)
        )
        # The context every unsampled new trace runs in.
        self.unsampled = trace.set_span_in_context(unsampled_span, Context())

    def unsampled_context(self) -> Context | None:
        """The context to run a new trace in when it is not sampled; None when it is, and
        then the next span this thread asks the SDK for without a parent gets the sampled
        trace id."""
        # Drawn here rather than through the id generator: this runs for every request,
        # and a zero draw (never a valid id) is sampled, so the SDK draws the id again.
        trace_id = random.getrandbits(128)
        if trace_id & self._limit < self._bound:
            self.ids.preset(trace_id)
            return None
        return self.unsampled
