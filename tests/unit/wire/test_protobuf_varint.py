"""The varint against protobuf's own encoding of the same numbers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from skiff_broker.wire.protobuf_varint import varint

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(INT64 | st.sampled_from([0, 1, 127, 128, 16383, 16384, -1, -(2**63), 2**63 - 1]))
def test_an_int64_is_written_as_protobuf_writes_it(value: int) -> None:
    # AnyValue.int_value is field 3, an int64: its key byte, then the varint.
    # A oneof member: written even when it is 0.
    assert b"\x18" + varint(value) == AnyValue(int_value=value).SerializeToString()
