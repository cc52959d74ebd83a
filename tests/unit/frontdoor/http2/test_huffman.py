"""The HPACK Huffman code (RFC 7541 Appendix B): the table, decode's checks, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skiff_broker.frontdoor.http2 import huffman
from skiff_broker.frontdoor.http2.huffman import HuffmanError

# RFC 7541 Appendix C.4 and C.6.
RFC_EXAMPLES = [
    (b"www.example.com", "f1e3c2e5f23a6ba0ab90f4ff"),
    (b"no-cache", "a8eb10649cbf"),
    (b"custom-key", "25a849e95ba97d7f"),
    (b"custom-value", "25a849e95bb8e8b4bf"),
    (b"302", "6402"),
    (b"307", "640eff"),
    (b"private", "aec3771a4b"),
    (b"Mon, 21 Oct 2013 20:13:21 GMT", "d07abe941054d444a8200595040b8166e082a62d1bff"),
    (b"Mon, 21 Oct 2013 20:13:22 GMT", "d07abe941054d444a8200595040b8166e084a62d1bff"),
    (b"https://www.example.com", "9d29ad171863c78f0b97c8e9ae82ae43d3"),
    (b"gzip", "9bd9ab"),
    (
        b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
        "94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
    ),
]

# Some codes of Appendix B, as (symbol, code, length in bits), from both ends of the table.
APPENDIX_B_CODES = [
    (0, 0x1FF8, 13),
    (1, 0x7FFFD8, 23),
    (10, 0x3FFFFFFC, 30),
    (13, 0x3FFFFFFD, 30),
    (22, 0x3FFFFFFE, 30),
    (ord(" "), 0x14, 6),
    (ord("0"), 0x0, 5),
    (ord("a"), 0x3, 5),
    (ord("z"), 0x7B, 7),
    (ord("~"), 0x1FFD, 13),
    (127, 0xFFFFFFC, 28),
    (128, 0xFFFE6, 20),
    (255, 0x3FFFFEE, 26),
    (256, 0x3FFFFFFF, 30),
]


@pytest.mark.parametrize(("plain", "coded"), RFC_EXAMPLES)
def test_the_rfc_examples_encode_and_decode(plain, coded):
    assert huffman.encode(plain).hex() == coded
    assert huffman.decode(bytes.fromhex(coded)) == plain
    assert huffman.decode(memoryview(bytes.fromhex(coded))) == plain


@pytest.mark.parametrize(("symbol", "code", "length"), APPENDIX_B_CODES)
def test_codes_match_appendix_b(symbol, code, length):
    assert huffman._CODES[symbol] == code
    assert huffman._LENGTHS[symbol] == length


def test_the_empty_string():
    assert huffman.encode(b"") == b""
    assert huffman.decode(b"") == b""


def test_every_octet_round_trips_alone_and_together():
    for octet in range(256):
        assert huffman.decode(huffman.encode(bytes([octet]))) == bytes([octet])
    everything = bytes(range(256)) * 3
    assert huffman.decode(huffman.encode(everything)) == everything


@pytest.mark.parametrize(
    "coded",
    [
        "fffffffc",  # EOS (30 ones), then "00"
        "ffffffff",  # EOS, then "11"
        "1fffffffff",  # "a" (00011), then EOS, then five ones
    ],
)
def test_eos_in_the_string_is_refused(coded):
    with pytest.raises(HuffmanError, match="EOS symbol"):
        huffman.decode(bytes.fromhex(coded))


@pytest.mark.parametrize(
    "coded",
    [
        "ff",  # 8 bits of ones, no symbol
        "1fff",  # "a" (00011), then 11 ones
        "f1e3c2e5f23a6ba0ab90f4ffff",  # www.example.com with an extra octet of ones
    ],
)
def test_padding_longer_than_7_bits_is_refused(coded):
    with pytest.raises(HuffmanError, match=r"padding is .* more than 7"):
        huffman.decode(bytes.fromhex(coded))


@pytest.mark.parametrize(
    "coded",
    [
        "00",  # "0" (00000), then "000"
        "1c",  # "a" (00011), then "100"
        "f1e3c2e5f23a6ba0ab90f4fe",  # www.example.com, last padding bit 0
        "fe",  # 8 bits, a prefix of longer codes, not all ones
    ],
)
def test_padding_other_than_ones_is_refused(coded):
    with pytest.raises(HuffmanError, match="not the leading bits of EOS"):
        huffman.decode(bytes.fromhex(coded))


def test_huffman_error_is_a_value_error():
    assert issubclass(HuffmanError, ValueError)


@settings(deadline=None)
@given(st.binary(max_size=512))
def test_decode_undoes_encode(data):
    coded = huffman.encode(data)
    assert huffman.decode(coded) == data
    # The shortest padding: whole codes fill all but at most 7 bits of the last octet.
    assert len(coded) == (sum(huffman._LENGTHS[octet] for octet in data) + 7) // 8


def _decode_bit_by_bit(data: bytes) -> bytes:
    """RFC 7541 5.2 read literally, one bit at a time: the reference for decode()."""
    codes = {(length, code): symbol for symbol, (code, length) in enumerate(
        zip(huffman._CODES, huffman._LENGTHS, strict=True)
    )}  # fmt: skip
    out = bytearray()
    code = length = 0
    for octet in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((octet >> shift) & 1)
            length += 1
            symbol = codes.get((length, code))
            if symbol == 256:
                raise HuffmanError("EOS symbol")
            if symbol is not None:
                out.append(symbol)
                code = length = 0
    if length > 7:
        raise HuffmanError("padding is too long")
    if code != (1 << length) - 1:
        raise HuffmanError("padding is not the leading bits of EOS")
    return bytes(out)


@settings(deadline=None)
@given(st.binary(max_size=64))
def test_any_octets_decode_as_the_bit_by_bit_reading_does(data):
    try:
        expected = _decode_bit_by_bit(data)
    except HuffmanError:
        with pytest.raises(HuffmanError):
            huffman.decode(data)
    else:
        assert huffman.decode(data) == expected


@settings(deadline=None)
@given(st.binary(min_size=1, max_size=64), st.integers(1, 7))
def test_valid_strings_cut_short_or_padded_wrong_are_refused_or_decode_as_read(data, cut):
    coded = huffman.encode(data)
    for damaged in (coded[:-1], coded + b"\xff", coded[:-1] + bytes([coded[-1] & ~cut & 0xFF])):
        try:
            expected = _decode_bit_by_bit(damaged)
        except HuffmanError:
            with pytest.raises(HuffmanError):
                huffman.decode(damaged)
        else:
            assert huffman.decode(damaged) == expected
