"""Skiff's HPACK against python-hyper's ``hpack``, an independent implementation of RFC 7541.

What one side encodes the other decodes to the same header list, and the same input
gives both decoders the same answer and the same dynamic table:

* Skiff's encoder (static-table references and raw literals, never indexing) through
  hpack's decoder, whose dynamic table must stay empty.
* hpack's encoder (Huffman or not, indexing, never-indexed fields, table-size updates,
  several in one block) through Skiff's decoder, block after block on one connection.
* Arbitrary and mutated blocks through both decoders: both accept with the same list
  and table, or both refuse.
* The Huffman code both ways.

Names and values are compared as octets (Skiff's latin-1 str, hpack's raw bytes). The
case counts are bounded and derandomized, so a run takes seconds and gives the same
cases each time; SKIFF_HTTP2_EXAMPLES raises them (scripts/fuzz-http2 --oracles).
"""

from __future__ import annotations

import hpack
import pytest
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hpack.huffman_table import decode_huffman
from hypothesis import given
from hypothesis import strategies as st
from tests.support.http2_fuzz import bounded_examples, mutated

from skiff_broker.frontdoor.http2 import hpack as skiff_hpack
from skiff_broker.frontdoor.http2 import huffman
from skiff_broker.frontdoor.http2.hpack import (
    HeaderDecoder,
    HeaderListTooLarge,
    HpackError,
    encode_headers,
)

# Large enough that no generated list is over either decoder's limit.
NO_LIMIT = 1 << 24
STATIC_NAMES = sorted({name for name, _ in skiff_hpack._STATIC_TABLE})

# Short values of any octets, and long ones (lengths past one octet's prefix) cheap to make.
octets = st.one_of(
    st.binary(max_size=24),
    st.tuples(st.binary(min_size=1, max_size=4), st.integers(30, 120)).map(lambda p: p[0] * p[1]),
)
names = st.one_of(
    st.sampled_from([n.encode() for n in STATIC_NAMES]),
    st.from_regex(rb"\A[a-z][a-z0-9-]{0,15}\Z"),
    st.binary(max_size=40),
)
fields = st.one_of(
    st.tuples(names, octets),
    st.sampled_from([(n.encode(), v.encode()) for n, v in skiff_hpack._STATIC_TABLE]),
)
header_lists = st.lists(fields, max_size=8)


def as_text(headers: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(n.decode("latin-1"), v.decode("latin-1")) for n, v in headers]


def as_octets(headers: object) -> list[tuple[bytes, bytes]]:
    return [(bytes(n), bytes(v)) for n, v in headers]  # type: ignore[attr-defined]


def skiff_table(decoder: HeaderDecoder) -> list[tuple[bytes, bytes]]:
    return [(n.encode("latin-1"), v.encode("latin-1")) for n, v in decoder.dynamic_table]


def hpack_table(table: hpack.hpack.HeaderTable) -> list[tuple[bytes, bytes]]:
    return [(bytes(n), bytes(v)) for n, v in table.dynamic_entries]


def hpack_decoder(max_table_size: int = 4096) -> hpack.Decoder:
    decoder = hpack.Decoder(max_header_list_size=NO_LIMIT)
    decoder.max_allowed_table_size = decoder.header_table_size = max_table_size
    return decoder


# -- Skiff encodes, hpack decodes ------------------------------------------------------------


@bounded_examples(60)
@given(st.lists(header_lists, min_size=1, max_size=4))
def test_skiff_blocks_decode_the_same_with_hpack_and_leave_its_table_empty(blocks):
    decoder = hpack_decoder()
    for headers in blocks:
        block = encode_headers(as_text(headers))
        assert as_octets(decoder.decode(block, raw=True)) == headers
        # Skiff never indexes: the client's decoder keeps nothing for it.
        assert hpack_table(decoder.header_table) == []


# -- hpack encodes, Skiff decodes ------------------------------------------------------------


@st.composite
def encoder_steps(draw: st.DrawFn, max_table_size: int) -> list:
    """Blocks for one connection: before each, maybe table-size changes; each field maybe
    never indexed; each block Huffman-coded or not."""
    steps = []
    for _ in range(draw(st.integers(1, 5))):
        resizes = draw(st.lists(st.integers(0, max_table_size), max_size=3))
        headers = draw(st.lists(st.tuples(fields, st.booleans()), max_size=8))
        steps.append((resizes, headers, draw(st.booleans())))
    return steps


@bounded_examples(40)
@given(st.data(), st.sampled_from([0, 1, 64, 256, 4096]))
def test_hpack_blocks_decode_the_same_with_skiff_table_and_all(data, max_table_size):
    encoder = hpack.Encoder()
    encoder.header_table_size = max_table_size
    decoder = HeaderDecoder(max_table_size=max_table_size, max_header_list_size=NO_LIMIT)
    pool = data.draw(st.lists(fields, min_size=1, max_size=6))
    for resizes, headers, huffman_coded in data.draw(encoder_steps(max_table_size)):
        # Repeats from a small pool, so later fields are found in the dynamic table.
        headers += [(f, False) for f in data.draw(st.lists(st.sampled_from(pool), max_size=6))]
        for size in resizes:
            # (hpack's encoder forgets a pending change when set to the size it has)
            if size != encoder.header_table_size:
                encoder.header_table_size = size
        block = encoder.encode([(n, v, never) for (n, v), never in headers], huffman_coded)
        assert decoder.decode(block) == as_text([field for field, _ in headers])
        assert skiff_table(decoder) == hpack_table(encoder.header_table)
        assert decoder.table_capacity == encoder.header_table_size


def test_never_indexed_fields_stay_out_of_the_table_and_size_updates_stack():
    encoder = hpack.Encoder()
    encoder.header_table_size = 100
    encoder.header_table_size = 0
    encoder.header_table_size = 200
    block = encoder.encode(
        [(b"authorization", b"secret", True), (b"x-kept", b"1"), (b"x-private", b"2", True)]
    )
    # Three size updates first (RFC 7541 4.2), then a never-indexed literal (0x10) with an
    # indexed name, a literal entering the table (0x40), a never-indexed new name.
    assert block[:4] == bytes([0x3F, 0x45, 0x20, 0x3F])
    decoder = HeaderDecoder(max_table_size=4096)
    headers = decoder.decode(block)
    assert headers == [("authorization", "secret"), ("x-kept", "1"), ("x-private", "2")]
    assert decoder.dynamic_table == (("x-kept", "1"),)
    assert decoder.table_capacity == 200


# -- the same input, both decoders -----------------------------------------------------------


def decode_both(
    skiff: HeaderDecoder, oracle: hpack.Decoder, block: bytes
) -> tuple[list[tuple[bytes, bytes]] | None, list[tuple[bytes, bytes]] | None, str]:
    try:
        ours: list[tuple[bytes, bytes]] | None = [
            (n.encode("latin-1"), v.encode("latin-1")) for n, v in skiff.decode(block)
        ]
        why = ""
    except (HpackError, HeaderListTooLarge) as error:
        ours, why = None, str(error)
    try:
        theirs: list[tuple[bytes, bytes]] | None = as_octets(oracle.decode(block, raw=True))
    except hpack.HPACKError as error:
        theirs, why = None, f"{why} / hpack: {error!r}"
    return ours, theirs, why


def assert_same_answer(skiff: HeaderDecoder, oracle: hpack.Decoder, block: bytes) -> bool:
    """Both accept the block alike (True), or both refuse it (False)."""
    ours, theirs, why = decode_both(skiff, oracle, block)
    assert (ours is None) == (theirs is None), f"block {block.hex()}: {why}"
    if ours is None:
        return False
    assert ours == theirs, block.hex()
    assert skiff_table(skiff) == hpack_table(oracle.header_table), block.hex()
    assert skiff.table_capacity == oracle.header_table_size
    return True


@bounded_examples(100)
@given(st.data(), st.sampled_from([0, 100, 4096]))
def test_mutated_blocks_get_the_same_answer_from_both_decoders(data, max_table_size):
    encoder = hpack.Encoder()
    skiff = HeaderDecoder(max_table_size=max_table_size, max_header_list_size=NO_LIMIT)
    oracle = hpack_decoder(max_table_size)
    for _ in range(data.draw(st.integers(1, 4))):
        headers = data.draw(header_lists)
        if data.draw(st.booleans()):
            encoder.header_table_size = data.draw(st.integers(0, 2 * max_table_size + 1))
        block = encoder.encode(headers, data.draw(st.booleans()))
        block = mutated(block, data.draw(st.randoms(use_true_random=False)))
        if not assert_same_answer(skiff, oracle, block):
            return  # a refused block ends the connection: the tables mean nothing after


@bounded_examples(200)
@given(st.lists(st.binary(max_size=64), min_size=1, max_size=4))
def test_arbitrary_octets_get_the_same_answer_from_both_decoders(blocks):
    skiff = HeaderDecoder(max_table_size=4096, max_header_list_size=NO_LIMIT)
    oracle = hpack_decoder()
    for block in blocks:
        if not assert_same_answer(skiff, oracle, block):
            return


@pytest.mark.parametrize(
    ("block", "what"),
    [
        (bytes([0x80]), "index 0"),
        (bytes([0xBE]), "an empty dynamic table"),
        (bytes([0x3F, 0xE2, 0x1F]), "a size update over the advertised 4096"),
        (bytes([0x82, 0x20]), "a size update after a field"),
        (bytes([0x40, 0x81, 0xFF, 0x00]), "a name of Huffman padding longer than 7 bits"),
        (bytes([0x00, 0x85, 0x61]), "a name running past the block"),
        (bytes([0xFF, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]), "an integer of 6 octets"),
    ],
)
def test_both_decoders_refuse_the_same_broken_blocks(block, what):
    ours, theirs, why = decode_both(HeaderDecoder(), hpack_decoder(), block)
    assert ours is None and theirs is None, f"{what}: {why}"


def test_a_list_over_the_limit_is_refused_by_both():
    block = hpack.Encoder().encode([(b"x-big", b"v" * 200)], huffman=False)
    # 5 + 200 + 32 octets against a limit of 236.
    with pytest.raises(HeaderListTooLarge):
        HeaderDecoder(max_header_list_size=236).decode(block)
    with pytest.raises(hpack.OversizedHeaderListError):
        hpack.Decoder(max_header_list_size=236).decode(block)
    assert HeaderDecoder(max_header_list_size=237).decode(block) == [("x-big", "v" * 200)]


# -- the Huffman code --------------------------------------------------------------------------

hpack_huffman = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)


@bounded_examples(150)
@given(st.binary(max_size=200))
def test_huffman_codes_are_hpacks_and_decode_both_ways(data):
    coded = huffman.encode(data)
    assert coded == hpack_huffman.encode(data)
    assert decode_huffman(coded) == data
    assert huffman.decode(hpack_huffman.encode(data)) == data


@bounded_examples(200)
@given(st.one_of(st.binary(max_size=16), st.binary(max_size=16).map(hpack_huffman.encode)))
def test_huffman_strings_are_accepted_or_refused_alike(data):
    try:
        ours: bytes | None = huffman.decode(data)
    except huffman.HuffmanError:
        ours = None
    try:
        theirs: bytes | None = decode_huffman(data)
    except hpack.HPACKDecodingError:
        theirs = None
    assert ours == theirs, data.hex()
