"""BODYCRC is zlib's CRC-32 with the sign bit cleared, whatever buffer holds the body."""

from __future__ import annotations

import mmap
import zlib

from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.wire.body_crc import body_crc, crc32


@given(body=st.binary(max_size=9000), cut=st.integers(0, 64))
def test_the_crc_is_zlibs_on_every_buffer_a_record_sits_in(body: bytes, cut: int) -> None:
    expected = zlib.crc32(body[cut:]) & 0x7FFFFFFF
    assert body_crc(body[cut:]) == expected
    assert body_crc(bytearray(body)[cut:]) == expected
    assert body_crc(memoryview(body)[cut:]) == expected
    assert crc32(body) == zlib.crc32(body)


def test_a_body_in_a_mapped_file_has_the_same_crc(tmp_path) -> None:
    body = bytes(range(256)) * 37
    path = tmp_path / "segment"
    path.write_bytes(b"\x00" * 100 + body)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert body_crc(memoryview(mapped)[100:]) == zlib.crc32(body) & 0x7FFFFFFF
