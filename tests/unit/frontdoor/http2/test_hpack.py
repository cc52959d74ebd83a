"""HPACK (RFC 7541): the decoder and its dynamic table, its refusals, and the encoder."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skiff_broker.frontdoor.http2 import hpack, huffman
from skiff_broker.frontdoor.http2.hpack import (
    HeaderDecoder,
    HeaderListTooLarge,
    HpackError,
    encode_headers,
)

GET_ROOT = [(":method", "GET"), (":scheme", "http"), (":path", "/")]
GET_INDEX = [(":method", "GET"), (":scheme", "https"), (":path", "/index.html")]
AUTHORITY = (":authority", "www.example.com")
NO_CACHE = ("cache-control", "no-cache")
CUSTOM = ("custom-key", "custom-value")

# RFC 7541 C.3 (raw strings) and C.4 (the same requests, Huffman-coded): each block, the
# list it decodes to, then the dynamic table after it (newest first) and its size.
REQUESTS = [
    ([*GET_ROOT, AUTHORITY], [AUTHORITY], 57),
    ([*GET_ROOT, AUTHORITY, NO_CACHE], [NO_CACHE, AUTHORITY], 110),
    ([*GET_INDEX, AUTHORITY, CUSTOM], [CUSTOM, NO_CACHE, AUTHORITY], 164),
]
C3_BLOCKS = [
    "828684410f7777772e6578616d706c652e636f6d",
    "828684be58086e6f2d6361636865",
    "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
]
C4_BLOCKS = [
    "828684418cf1e3c2e5f23a6ba0ab90f4ff",
    "828684be5886a8eb10649cbf",
    "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
]

# RFC 7541 C.5 (raw) and C.6 (Huffman): responses through a table of 256 octets, which
# evicts.
PRIVATE = ("cache-control", "private")
DATE_21 = ("date", "Mon, 21 Oct 2013 20:13:21 GMT")
DATE_22 = ("date", "Mon, 21 Oct 2013 20:13:22 GMT")
LOCATION = ("location", "https://www.example.com")
GZIP = ("content-encoding", "gzip")
COOKIE = ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1")
RESPONSES = [
    (
        [(":status", "302"), PRIVATE, DATE_21, LOCATION],
        [LOCATION, DATE_21, PRIVATE, (":status", "302")],
        222,
    ),
    (
        [(":status", "307"), PRIVATE, DATE_21, LOCATION],
        [(":status", "307"), LOCATION, DATE_21, PRIVATE],
        222,
    ),
    (
        [(":status", "200"), PRIVATE, DATE_22, LOCATION, GZIP, COOKIE],
        [COOKIE, GZIP, DATE_22],
        215,
    ),
]
C5_BLOCKS = [
    "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a3231"
    "20474d546e1768747470733a2f2f7777772e6578616d706c652e636f6d",
    "4803333037c1c0bf",
    "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738"
    "666f6f3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167653d33"
    "3630303b2076657273696f6e3d31",
]
C6_BLOCKS = [
    "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad1718"
    "63c78f0b97c8e9ae82ae43d3",
    "4883640effc1c0bf",
    "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7"
    "b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
]


def integer(first: int, prefix_bits: int, value: int) -> bytes:
    """An HPACK integer (RFC 7541 5.1) whose first octet carries the flags in first."""
    top = (1 << prefix_bits) - 1
    if value < top:
        return bytes([first | value])
    out = bytearray([first | top])
    value -= top
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(text: str, *, huffman_coded: bool = False) -> bytes:
    raw = text.encode("latin-1")
    if huffman_coded:
        raw = huffman.encode(raw)
    return integer(0x80 if huffman_coded else 0x00, 7, len(raw)) + raw


def incremental(name: str, value: str, *, huffman_coded: bool = False) -> bytes:
    """A literal with incremental indexing and a new name."""
    return (
        b"\x40"
        + string(name, huffman_coded=huffman_coded)
        + string(value, huffman_coded=huffman_coded)
    )


def size_update(size: int) -> bytes:
    return integer(0x20, 5, size)


# -- RFC 7541 Appendix C ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "headers", "table"),
    [
        # C.2.1: literal with indexing.
        (
            "400a637573746f6d2d6b65790d637573746f6d2d686561646572",
            [("custom-key", "custom-header")],
            [("custom-key", "custom-header")],
        ),
        # C.2.2: literal without indexing.
        ("040c2f73616d706c652f70617468", [(":path", "/sample/path")], []),
        # C.2.3: literal never indexed.
        ("100870617373776f726406736563726574", [("password", "secret")], []),
        # C.2.4: indexed field.
        ("82", [(":method", "GET")], []),
    ],
)
def test_the_rfc_single_field_examples(block, headers, table):
    decoder = HeaderDecoder()
    assert decoder.decode(bytes.fromhex(block)) == headers
    assert decoder.dynamic_table == tuple(table)
    assert decoder.dynamic_table_size == sum(len(n) + len(v) + 32 for n, v in table)


@pytest.mark.parametrize("blocks", [C3_BLOCKS, C4_BLOCKS], ids=["C.3", "C.4"])
def test_the_rfc_request_sequences(blocks):
    decoder = HeaderDecoder()
    for block, (headers, table, size) in zip(blocks, REQUESTS, strict=True):
        assert decoder.decode(bytes.fromhex(block)) == headers
        assert decoder.dynamic_table == tuple(table)
        assert decoder.dynamic_table_size == size


@pytest.mark.parametrize("blocks", [C5_BLOCKS, C6_BLOCKS], ids=["C.5", "C.6"])
def test_the_rfc_response_sequences_evict(blocks):
    decoder = HeaderDecoder(max_table_size=256)
    for block, (headers, table, size) in zip(blocks, RESPONSES, strict=True):
        assert decoder.decode(bytes.fromhex(block)) == headers
        assert decoder.dynamic_table == tuple(table)
        assert decoder.dynamic_table_size == size


def test_a_memoryview_decodes_as_its_bytes():
    decoder = HeaderDecoder()
    assert decoder.decode(memoryview(bytes.fromhex(C4_BLOCKS[0]))) == REQUESTS[0][0]


def test_octets_are_latin_1_and_round_trip():
    every_octet = bytes(range(256)).decode("latin-1")
    decoder = HeaderDecoder()
    block = b"\x00" + string("x-bin") + string(every_octet, huffman_coded=True)
    assert decoder.decode(block) == [("x-bin", every_octet)]


def test_an_empty_block_is_an_empty_list():
    assert HeaderDecoder().decode(b"") == []


# -- refusals: HpackError ------------------------------------------------------------------


def refused(block: bytes, match: str, decoder: HeaderDecoder | None = None) -> None:
    with pytest.raises(HpackError, match=match):
        (decoder or HeaderDecoder()).decode(block)


def test_index_0_is_refused():
    refused(b"\x82\x80", "index 0")


@pytest.mark.parametrize(
    "block",
    [
        b"\xbe",  # indexed field 62, table empty
        integer(0x80, 7, 1000),
        b"\x7e" + string("v"),  # literal with indexing, name 62
        b"\x0f\x2f" + string("v"),  # literal without indexing, name 62
        b"\x1f\x2f" + string("v"),  # never indexed, name 62
    ],
)
def test_an_index_past_the_tables_is_refused(block):
    refused(block, "past the tables' end")


def test_an_index_past_the_dynamic_table_is_refused_after_entries():
    decoder = HeaderDecoder()
    decoder.decode(incremental("a", "1") + incremental("b", "2"))
    assert decoder.decode(b"\xbe\xbf") == [("b", "2"), ("a", "1")]
    refused(b"\xc0", r"index 64 is past the tables' end \(61 static \+ 2 dynamic", decoder)


@pytest.mark.parametrize(
    ("block", "match"),
    [
        (b"\xff", "integer runs past the end"),
        (b"\xff\x80\x80", "integer runs past the end"),
        (b"\xff\xff\xff\xff\xff\xff\x00", "more than 5 continuation octets"),
        (b"\xff\xff\xff\xff\x7f", "over the limit"),  # 2**28 + 126
        (b"\x00\x7f\xff\xff\xff\xff\x0f", "over the limit"),  # a string length
    ],
)
def test_bad_integers_are_refused(block, match):
    refused(block, match)


def test_padded_integers_within_bounds_are_read():
    decoder = HeaderDecoder()
    decoder.decode(incremental("a", "1"))
    # Name 62 as 15 + 47, the continuation padded with zero bits to five octets.
    assert decoder.decode(b"\x0f\xaf\x80\x80\x80\x00" + string("2")) == [("a", "2")]
    refused(b"\x0f\xaf\x80\x80\x80\x80\x00" + string("2"), "more than 5 continuation", decoder)


@pytest.mark.parametrize(
    ("block", "match"),
    [
        (b"\x40", "header name missing at the end of the block"),
        (b"\x40" + string("name"), "header value missing at the end of the block"),
        (b"\x44", "header value missing"),  # :path, no value
        (b"\x40\x0acustom", "header name of 10 octets runs 4 past the block's end"),
        (b"\x00" + string("k") + b"\x85abc", "header value of 5 octets runs 2 past"),
        (b"\x00" + string("k") + b"\x85\xff\xff", "header value of 5 octets runs 3 past"),
    ],
)
def test_a_block_ending_inside_a_field_is_refused(block, match):
    refused(block, match)


@pytest.mark.parametrize(
    ("block", "match"),
    [
        (b"\x00\x81\xff" + string("v"), "header name: .*padding is 8 bits"),
        (b"\x00" + string("k") + b"\x81\x00", "header value: .*not the leading bits of EOS"),
        (b"\x40" + string("k") + b"\x84\xff\xff\xff\xff", "header value: .*EOS symbol"),
        (b"\x04\x81\xfe", "header value: .*not the leading bits of EOS"),
    ],
)
def test_bad_huffman_strings_are_compression_errors(block, match):
    refused(block, match)


def test_a_huffman_error_is_not_leaked_as_such():
    with pytest.raises(HpackError) as caught:
        HeaderDecoder().decode(b"\x00\x81\xff" + string("v"))
    assert not isinstance(caught.value, huffman.HuffmanError)


# -- dynamic table size updates ------------------------------------------------------------


def test_a_size_update_after_a_field_is_refused():
    refused(b"\x82\x20", "size update after a header field")
    refused(b"\x20\x82\x3f\xe1\x1f", "size update after a header field")


def test_a_size_update_over_the_advertised_maximum_is_refused():
    refused(size_update(4097), "size update to 4097 is over the 4096 allowed")
    refused(size_update(101), "over the 100 allowed", HeaderDecoder(max_table_size=100))
    refused(size_update(1), "over the 0 allowed", HeaderDecoder(max_table_size=0))


def test_size_updates_at_the_maximum_and_several_at_the_start_are_taken():
    decoder = HeaderDecoder()
    assert decoder.decode(size_update(0) + size_update(4096) + b"\x82") == [(":method", "GET")]
    assert decoder.table_capacity == 4096
    assert decoder.decode(size_update(100)) == []
    assert decoder.table_capacity == 100


def test_a_size_update_to_0_empties_the_table():
    decoder = HeaderDecoder()
    for block in C3_BLOCKS:
        decoder.decode(bytes.fromhex(block))
    assert len(decoder.dynamic_table) == 3
    assert decoder.decode(size_update(0)) == []
    assert decoder.dynamic_table == ()
    assert decoder.dynamic_table_size == 0
    refused(b"\xbe", "past the tables' end", decoder)


def test_a_size_update_evicts_the_oldest_entries():
    decoder = HeaderDecoder()
    for block in C3_BLOCKS:
        decoder.decode(bytes.fromhex(block))
    # 164 octets: custom (54), no-cache (53), authority (57). Keep the newest two.
    assert decoder.decode(size_update(107) + b"\xbe\xbf") == [CUSTOM, NO_CACHE]
    assert decoder.dynamic_table == (CUSTOM, NO_CACHE)
    assert decoder.dynamic_table_size == 107
    # Under a table of 0, an entry is not kept, but the field is still decoded.
    assert decoder.decode(size_update(0) + incremental("a", "1")) == [("a", "1")]
    assert decoder.dynamic_table == ()


def test_an_entry_larger_than_the_table_empties_it():
    decoder = HeaderDecoder(max_table_size=100)
    decoder.decode(incremental("a", "1"))
    assert decoder.decode(incremental("big", "x" * 66)) == [("big", "x" * 66)]  # 101 octets
    assert decoder.dynamic_table == ()
    decoder.decode(incremental("fits", "x" * 64))  # 100 octets exactly
    assert decoder.dynamic_table_size == 100


def test_an_entry_may_name_the_entry_its_arrival_evicts():
    decoder = HeaderDecoder(max_table_size=40)
    decoder.decode(incremental("k", "1"))  # 34 octets: the whole table's room
    assert decoder.decode(b"\x7e" + string("22")) == [("k", "22")]  # name 62, then evicted
    assert decoder.dynamic_table == (("k", "22"),)


# -- header list too large: a stream error, the table kept in step -------------------------


def test_header_list_too_large_is_not_a_compression_error():
    assert not issubclass(HeaderListTooLarge, HpackError)


def test_a_list_at_the_limit_is_taken_and_one_octet_more_is_refused():
    # ":method: GET" is 7 + 3 + 32 = 42 octets.
    assert HeaderDecoder(max_header_list_size=84).decode(b"\x82\x82") == [(":method", "GET")] * 2
    with pytest.raises(HeaderListTooLarge, match=r"at least 84 octets .* over the 83 allowed"):
        HeaderDecoder(max_header_list_size=83).decode(b"\x82\x82")


def test_an_oversized_list_still_fills_the_table():
    decoder = HeaderDecoder(max_header_list_size=200)
    big = "v" * 300
    block = (
        incremental("x-first", "1", huffman_coded=True)
        + b"\x00" + string("x-skipped") + string(big)  # not indexed, over the limit
        + incremental("x-big", big, huffman_coded=True)  # enters the table though over
        + incremental("x-after", "2", huffman_coded=True)
        + b"\x82"
    )  # fmt: skip
    with pytest.raises(HeaderListTooLarge, match="over the 200 allowed"):
        decoder.decode(block)
    assert decoder.dynamic_table == (("x-after", "2"), ("x-big", big), ("x-first", "1"))
    # The next block refers to all three; a list within the limit decodes as usual.
    with pytest.raises(HeaderListTooLarge):
        decoder.decode(b"\xbe\xbf\xc0")
    assert decoder.decode(b"\xbe\xc0") == [("x-after", "2"), ("x-first", "1")]


def test_an_oversized_list_is_refused_only_after_the_whole_block():
    decoder = HeaderDecoder(max_header_list_size=50)
    block = incremental("x-one", "v" * 60) + incremental("x-two", "w")
    with pytest.raises(HeaderListTooLarge):
        decoder.decode(block)
    assert decoder.decode(b"\xbe") == [("x-two", "w")]
    # The block must still be well formed: a bad field after the limit is still an error.
    refused(block + b"\x80", "index 0", decoder)
    refused(block + b"\x40\x01", "runs 1 past the block's end", decoder)


def test_a_field_past_the_limit_not_entering_the_table_is_skipped_undecoded():
    # A Huffman string that would not decode: after the limit it is not even looked at.
    decoder = HeaderDecoder(max_header_list_size=50)
    bad = b"\x00" + string("x") + b"\x82\xff\xff"
    refused(bad, "padding", decoder)
    with pytest.raises(HeaderListTooLarge):
        decoder.decode(b"\x82\x82" + bad)
    # A single string longer than the limit, raw or Huffman-coded, is refused without
    # being decoded.
    long_string = b"\x00" + string("x") + integer(0x80, 7, 300) + b"\xff" * 300
    with pytest.raises(HeaderListTooLarge):
        decoder.decode(long_string)
    # Entering the table, it is decoded, and its fault found.
    refused(b"\x40" + long_string[1:], "EOS symbol", decoder)


def decoding_work(decoder: HeaderDecoder, block: bytes) -> int:
    """Lines of the decoder's Python run to decode ``block``: its work, counted the same on
    any machine (what runs in C, such as a regular expression, counts for nothing)."""
    files = {hpack.__file__, huffman.__file__}
    lines = 0

    def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal lines
        if frame.f_code.co_filename not in files:
            return None
        if event == "line":
            lines += 1
        return tracer

    sys.settrace(tracer)
    try:
        decoder.decode(block)
    except HeaderListTooLarge:
        pass
    finally:
        sys.settrace(None)
    return lines


def literal_block(size: int) -> bytes:
    """Literal fields without indexing, new names, as gRPC metadata looks, ``size`` octets."""
    block = b""
    n = 0
    while len(block) < size:
        block += b"\x00" + string(f"x-meta-{n}") + string(f"value-{n:024d}")
        n += 1
    return block[:size] if len(block) == size else block


@pytest.mark.parametrize("value", ["", "1", "v" * 100, "v" * 3000])
def test_references_to_one_entry_cost_no_more_than_literals_of_the_same_size(value):
    # 16,000 references to one table entry: the bomb of an indexed reference that costs
    # the sender one octet and a decoder that decodes it one field.
    decoder = HeaderDecoder()
    decoder.decode(incremental("x-bomb", value))
    bomb = b"\xbe" * 16_000
    literals = literal_block(len(bomb))
    assert decoding_work(decoder, bomb) <= decoding_work(HeaderDecoder(), literals)
    # And the table is what it was: the next block still means what the peer meant.
    assert decoder.decode(b"\xbe") == [("x-bomb", value)]


def test_references_coded_on_several_octets_are_skipped_past_the_limit_too():
    decoder = HeaderDecoder(max_header_list_size=1000)
    for n in range(70):
        decoder.decode(incremental(f"x-{n:02d}", "v"))
    oldest = integer(0x80, 7, hpack._STATIC_COUNT + 70)  # 0xff and one continuation octet
    assert len(oldest) == 2
    block = oldest * 8_000 + incremental("x-after", "w") + oldest
    assert decoding_work(decoder, block) <= decoding_work(HeaderDecoder(), literal_block(16_000))
    with pytest.raises(HeaderListTooLarge):
        decoder.decode(block)
    assert decoder.decode(b"\xbe") == [("x-after", "w")]
    # A reference past the limit whose integer never ends is still refused.
    refused(b"\xbe" * 100 + b"\xff" + b"\x80" * 6, "continuation octets", decoder)


# -- encode_headers ------------------------------------------------------------------------


def test_encode_uses_static_entries_and_raw_literals():
    block = encode_headers(
        [
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", "0"),
            (":status", "299"),
        ]
    )
    assert block == (
        b"\x88"
        + b"\x0f\x10" + string("application/grpc")  # name 31, literal without indexing
        + b"\x00" + string("grpc-status") + string("0")  # new name
        + b"\x08" + string("299")  # name 8
    )  # fmt: skip


def test_encoded_blocks_leave_the_decoders_table_empty():
    decoder = HeaderDecoder()
    headers = [(":status", "200"), ("grpc-message", "é" * 200), ("x", "")]
    assert decoder.decode(encode_headers(headers)) == headers
    assert decoder.dynamic_table == ()


texts = st.text(st.characters(max_codepoint=255), max_size=40)
STATIC_NAMES = sorted({name for name, _ in hpack._STATIC_TABLE})
names = st.one_of(st.sampled_from(STATIC_NAMES), texts)
header_lists = st.lists(
    st.one_of(st.tuples(names, texts), st.sampled_from(hpack._STATIC_TABLE)), max_size=12
)


@settings(deadline=None)
@given(header_lists)
def test_decode_undoes_encode_headers(headers):
    decoder = HeaderDecoder(max_header_list_size=1 << 20)
    assert decoder.decode(encode_headers(headers)) == headers
    assert decoder.dynamic_table == ()


# -- a decoder in step with an indexing, Huffman-coding encoder ----------------------------


class IndexingEncoder:
    """A test encoder using every representation the decoder reads, its choices drawn."""

    def __init__(self, capacity: int, draw) -> None:
        self.capacity = capacity
        self.table: list[tuple[str, str]] = []  # newest first
        self.draw = draw

    @property
    def size(self) -> int:
        return sum(len(n) + len(v) + 32 for n, v in self.table)

    def resize(self, capacity: int) -> bytes:
        self.capacity = capacity
        while self.size > capacity:
            self.table.pop()
        return size_update(capacity)

    def encode(self, headers: list[tuple[str, str]]) -> bytes:
        out = bytearray()
        for field in headers:
            everything = [*hpack._STATIC_TABLE, *self.table]
            if field in everything and self.draw(st.booleans()):
                out += integer(0x80, 7, everything.index(field) + 1)
                continue
            kind = self.draw(st.sampled_from([(0x40, 6), (0x00, 4), (0x10, 4)]))
            names = [n for n, _ in everything]
            if field[0] in names and self.draw(st.booleans()):
                out += integer(kind[0], kind[1], names.index(field[0]) + 1)
            else:
                out += integer(kind[0], kind[1], 0)
                out += string(field[0], huffman_coded=self.draw(st.booleans()))
            out += string(field[1], huffman_coded=self.draw(st.booleans()))
            if kind[0] == 0x40:
                size = len(field[0]) + len(field[1]) + 32
                while self.table and self.size + size > self.capacity:
                    self.table.pop()
                if size <= self.capacity:
                    self.table.insert(0, field)
        return bytes(out)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(0, 400), st.integers(1, 8))
def test_a_decoder_stays_in_step_with_an_indexing_encoder(data, table_size, block_count):
    pool = data.draw(st.lists(st.tuples(names, texts), min_size=1, max_size=8))
    fields = st.one_of(st.sampled_from(pool), st.sampled_from(hpack._STATIC_TABLE))
    encoder = IndexingEncoder(table_size, data.draw)
    decoder = HeaderDecoder(max_table_size=table_size, max_header_list_size=1 << 20)
    for _ in range(block_count):
        headers = data.draw(st.lists(fields, max_size=10))
        prefix = b""
        if data.draw(st.booleans()):
            prefix = encoder.resize(data.draw(st.integers(0, table_size)))
        assert decoder.decode(prefix + encoder.encode(headers)) == headers
        assert decoder.dynamic_table == tuple(encoder.table)
        assert decoder.dynamic_table_size == encoder.size
        assert decoder.table_capacity == encoder.capacity


# -- garbage -------------------------------------------------------------------------------

valid_start = st.sampled_from([b"", *(bytes.fromhex(b) for b in C4_BLOCKS + C6_BLOCKS)])


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.tuples(valid_start, st.binary(max_size=48)), max_size=4),
    st.integers(0, 300),
    st.integers(0, 400),
)
def test_garbage_raises_only_hpack_errors(blocks, table_size, list_size):
    decoder = HeaderDecoder(max_table_size=table_size, max_header_list_size=list_size)
    for start, garbage in blocks:
        try:
            headers = decoder.decode(start + garbage)
        except (HpackError, HeaderListTooLarge):
            continue
        assert all(type(n) is str and type(v) is str for n, v in headers)
        assert decoder.dynamic_table_size <= decoder.table_capacity <= table_size
