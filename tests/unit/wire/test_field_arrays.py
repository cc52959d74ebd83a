"""Fields of many records read at once equal struct's reading of each."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.wire.field_arrays import fields_at

FORMATS = {">i4": ">i", ">u4": ">I", ">i8": ">q", ">u2": ">H", ">u1": ">B"}


@given(st.binary(min_size=8, max_size=300), st.data())
def test_each_field_is_what_struct_reads_there(buf: bytes, data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(sorted(FORMATS)))
    width = struct.calcsize(FORMATS[dtype])
    end = data.draw(st.integers(width, len(buf)))
    positions = data.draw(st.lists(st.integers(0, end - width), max_size=20))
    got = fields_at(buf, end, np.array(positions, dtype=np.int64), dtype)
    assert got.tolist() == [struct.unpack_from(FORMATS[dtype], buf, p)[0] for p in positions]
    assert got.dtype == np.int64


def test_a_field_past_the_end_is_not_read() -> None:
    buf = bytes(range(16))
    assert fields_at(memoryview(buf), 8, np.array([4]), ">i4").tolist() == [0x04050607]
    with pytest.raises(IndexError):
        fields_at(memoryview(buf), 8, np.array([5]), ">i4")
