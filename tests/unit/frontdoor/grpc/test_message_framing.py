"""gRPC messages cut from DATA however the frames split them."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.frontdoor.grpc.message_framing import PREFIX, MessageReader, MessageTooLarge


def framed(messages: list[bytes]) -> bytes:
    return b"".join(PREFIX.pack(0, len(m)) + m for m in messages)


@given(
    messages=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=12),
)
def test_messages_come_out_whole_and_in_order_however_the_data_is_cut(messages, cuts):
    wire = framed(messages)
    points = sorted({0, len(wire), *(c for c in cuts if c < len(wire))})
    reader = MessageReader(limit=300)
    out = []
    for start, end in itertools.pairwise(points):
        out.extend(m for _, m in reader.feed(wire[start:end]))
    assert out == messages
    assert reader.between_messages and reader.buffered == 0 and reader.awaited == 0


def test_what_a_partial_message_still_awaits():
    reader = MessageReader(limit=1000)
    assert reader.feed(PREFIX.pack(0, 100) + b"x" * 30) == []
    assert reader.awaited == 70 and not reader.between_messages
    assert reader.feed(b"y" * 70 + PREFIX.pack(1, 2)) == [(0, b"x" * 30 + b"y" * 70)]
    assert reader.awaited == 2
    assert reader.feed(b"ab") == [(1, b"ab")]
    # An empty message is a prefix alone.
    assert reader.feed(PREFIX.pack(0, 0)) == [(0, b"")]


def test_a_length_over_the_limit_is_refused_before_its_octets_arrive():
    reader = MessageReader(limit=10)
    with pytest.raises(MessageTooLarge) as large:
        reader.feed(PREFIX.pack(0, 11))
    assert large.value.length == 11
