"""Finished spans as the bytes of an OTLP ``ExportTraceServiceRequest``, written directly.

The SDK's encoder builds a protobuf message object for every span, attribute and value
and costs about 50 µs for a broker span with a dozen attributes, several times what it
took to record the span. Here a span is written as protobuf wire bytes, and an
attribute is one dictionary look-up: most of a broker's attributes (the RPC method, the
topic, the broker's name) recur in every span, so each (key, value) pair is encoded
once and its bytes reused.

Invariant: the bytes parse to the message the SDK's ``encode_spans`` builds for the same
spans (the unit tests compare them), so any OTLP receiver reads them the same way. One
difference in grouping only: spans are grouped by resource object, where the SDK merges
equal resources of different providers (a broker has one provider).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext

from ..wire.protobuf_varint import varint

log = logging.getLogger(__name__)

# Protobuf wire types.
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5

# Span.flags: the parent's is_remote is known (bit 8), and whether it is remote (bit 9).
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
# Encoded attributes kept for reuse; past this many the cache starts over (message IDs
# and other one-off values would otherwise fill it).
MAX_CACHED_ATTRIBUTES = 4096
# Span names, resources and scopes kept encoded: a process has a handful of each.
_MAX_CACHED_HOLDERS = 64


def _tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _tag(field, _LENGTH) + varint(len(payload)) + payload


def _string(field: int, text: str) -> bytes:
    """A string field; nothing for the empty string (proto3 leaves defaults out)."""
    return _length_delimited(field, text.encode()) if text else b""


def _uint(field: int, value: int) -> bytes:
    return _tag(field, _VARINT) + varint(value) if value else b""


def _any_value(value: Any) -> bytes:
    """The fields of an ``AnyValue``."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return _tag(2, _VARINT) + varint(int(value))
    if isinstance(value, str):
        return _length_delimited(1, value.encode())
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"{value} does not fit in an int64")
        return _tag(3, _VARINT) + varint(value)
    if isinstance(value, float):
        return _tag(4, _FIXED64) + struct.pack("<d", value)
    if isinstance(value, bytes):
        return _length_delimited(7, value)
    if isinstance(value, Sequence):
        items = b"".join(_length_delimited(1, _any_value(item)) for item in value)
        return _length_delimited(5, items)
    if isinstance(value, Mapping):
        pairs = b"".join(_length_delimited(1, _key_value(str(k), v)) for k, v in value.items())
        return _length_delimited(6, pairs)
    raise TypeError(f"cannot encode {type(value).__name__} {value!r} as an attribute value")


def _key_value(key: str, value: Any) -> bytes:
    return _string(1, key) + _length_delimited(2, _any_value(value))


class SpanEncoder:
    """Writes batches of finished SDK spans as OTLP trace export requests.

    Safe to share between threads: its caches only ever gain or lose whole entries.
    """

    def __init__(self) -> None:
        # (field, key, type, value) -> the whole encoded attribute field. The type keeps
        # True, 1 and 1.0 apart, which compare (and hash) equal.
        self._attributes: dict[tuple[int, str, type, Any], bytes] = {}
        self._names: dict[str, bytes] = {}
        # id() -> (the object, its bytes): the reference keeps the id from being reused.
        self._resources: dict[int, tuple[Any, bytes]] = {}
        self._scopes: dict[int, tuple[Any, bytes]] = {}

    def encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        """One ``ExportTraceServiceRequest``: spans grouped by resource, then by scope, each
        group in the order it first appears."""
        grouped: dict[int, tuple[Any, dict[int, tuple[Any, list[bytes]]]]] = {}
        for span in spans:
            resource = span.resource
            scope = span.instrumentation_scope
            by_scope = grouped.get(id(resource))
            if by_scope is None:
                by_scope = grouped[id(resource)] = (resource, {})
            encoded = by_scope[1].get(id(scope))
            if encoded is None:
                encoded = by_scope[1][id(scope)] = (scope, [])
            encoded[1].append(self._span(span))
        out = []
        for resource, scopes in grouped.values():
            scope_spans = b"".join(
                _length_delimited(2, self._scope_spans(scope, encoded))
                for scope, encoded in scopes.values()
            )
            resource_spans = (
                _length_delimited(1, self._resource(resource))
                + scope_spans
                + _string(3, resource.schema_url or "")
            )
            out.append(_length_delimited(1, resource_spans))
        return b"".join(out)

    # -- spans -----------------------------------------------------------------

    def _span(self, span: ReadableSpan) -> bytes:
        context = span.context
        assert context is not None  # an SDK span always has one
        parent = span.parent
        parts = [
            b"\x0a\x10",  # trace_id: 16 bytes
            context.trace_id.to_bytes(16, "big"),
            b"\x12\x08",  # span_id: 8 bytes
            context.span_id.to_bytes(8, "big"),
        ]
        if context.trace_state:
            trace_state = ",".join(f"{k}={v}" for k, v in context.trace_state.items())
            parts.append(_string(3, trace_state))
        if parent is not None:
            parts += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
        name = self._names.get(span.name)
        if name is None:
            if len(self._names) >= _MAX_CACHED_HOLDERS:
                self._names.clear()
            name = self._names[span.name] = _string(5, span.name)
        parts += (
            name,
            _KINDS[span.kind.value],
            b"\x39",  # start_time_unix_nano, fixed64
            _FIXED64_VALUE.pack(span.start_time or 0),
            b"\x41",  # end_time_unix_nano, fixed64
            _FIXED64_VALUE.pack(span.end_time or 0),
        )
        self._add_attributes(parts, 9, span.attributes)
        if span.dropped_attributes:
            parts.append(_uint(10, span.dropped_attributes))
        for event in span.events:
            event_fields = [
                b"\x09",  # time_unix_nano, fixed64
                _FIXED64_VALUE.pack(event.timestamp),
                _string(2, event.name),
            ]
            self._add_attributes(event_fields, 3, event.attributes)
            event_fields.append(_uint(4, event.dropped_attributes))
            parts.append(_length_delimited(11, b"".join(event_fields)))
        if span.dropped_events:
            parts.append(_uint(12, span.dropped_events))
        for link in span.links:
            linked = link.context
            link_fields = [
                b"\x0a\x10",
                linked.trace_id.to_bytes(16, "big"),
                b"\x12\x08",
                linked.span_id.to_bytes(8, "big"),
            ]
            self._add_attributes(link_fields, 4, link.attributes)
            link_fields += (_uint(5, link.dropped_attributes), _flags(6, linked))
            parts.append(_length_delimited(13, b"".join(link_fields)))
        if span.dropped_links:
            parts.append(_uint(14, span.dropped_links))
        status = span.status
        if status.description or status.status_code.value:
            parts.append(
                _length_delimited(
                    15, _string(2, status.description or "") + _uint(3, status.status_code.value)
                )
            )
        else:
            parts.append(_UNSET_STATUS)
        parts.append(_REMOTE_PARENT if parent is not None and parent.is_remote else _LOCAL_PARENT)
        return b"".join(parts)

    def _add_attributes(self, parts: list[bytes], field: int, attributes: Any) -> None:
        if not attributes:
            return
        cache = self._attributes
        # Keys, then each value: an SDK span's attributes are a mapping proxy over a
        # mapping whose items() iterate in Python, a step per item.
        for key in attributes:
            value = attributes[key]
            try:
                cache_key = (field, key, type(value), value)
                encoded = cache.get(cache_key)
            except TypeError:  # an unhashable value: a list
                cache_key = None
                encoded = None
            if encoded is None:
                try:
                    encoded = _length_delimited(field, _key_value(key, value))
                except (TypeError, ValueError) as error:
                    # As the SDK's encoder does: the attribute is left out, the span goes.
                    log.warning("cannot export span attribute %s: %s", key, error)
                    continue
                if cache_key is not None:
                    if len(cache) >= MAX_CACHED_ATTRIBUTES:
                        cache.clear()
                    cache[cache_key] = encoded
            parts.append(encoded)

    # -- resources and scopes ----------------------------------------------------

    def _resource(self, resource: Any) -> bytes:
        known = self._resources.get(id(resource))
        if known is None or known[0] is not resource:
            if len(self._resources) >= _MAX_CACHED_HOLDERS:
                self._resources.clear()
            parts: list[bytes] = []
            self._add_attributes(parts, 1, resource.attributes)
            known = self._resources[id(resource)] = (resource, b"".join(parts))
        return known[1]

    def _scope_spans(self, scope: Any, spans: list[bytes]) -> bytes:
        known = self._scopes.get(id(scope))
        if known is None or known[0] is not scope:
            if len(self._scopes) >= _MAX_CACHED_HOLDERS:
                self._scopes.clear()
            if scope is None:
                fields = b""
            else:
                parts = [_string(1, scope.name), _string(2, scope.version or "")]
                self._add_attributes(parts, 3, scope.attributes)
                fields = b"".join(parts)
            known = self._scopes[id(scope)] = (scope, _length_delimited(1, fields))
        schema_url = scope.schema_url if scope is not None else ""
        return known[1] + b"".join(_length_delimited(2, s) for s in spans) + _string(3, schema_url)


_FIXED64_VALUE = struct.Struct("<Q")
# Span.kind: the SDK's SpanKind values are OTLP's minus one (OTLP's 0 is "unspecified").
_KINDS = [_uint(6, value + 1) for value in range(5)]
# Span.status when nothing was set: present, and empty.
_UNSET_STATUS = _length_delimited(15, b"")


def _flags(field: int, parent: SpanContext | None) -> bytes:
    flags = _HAS_IS_REMOTE
    if parent is not None and parent.is_remote:
        flags |= _IS_REMOTE
    return _tag(field, _FIXED32) + struct.pack("<I", flags)


# Span.flags, the field being 16.
_LOCAL_PARENT = _flags(16, None)
_REMOTE_PARENT = _tag(16, _FIXED32) + struct.pack("<I", _HAS_IS_REMOTE | _IS_REMOTE)
