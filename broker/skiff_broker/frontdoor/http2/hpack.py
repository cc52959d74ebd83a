"""HPACK header compression (RFC 7541): the decoder for requests, the encoder for responses.

HeaderDecoder keeps the connection's dynamic table. Invariants:

* The table stays in step with the peer's encoder whenever decode() returns or raises
  HeaderListTooLarge. Only HpackError (a COMPRESSION_ERROR) leaves the table out of
  step, and the connection then closes.
* Work is bounded by the header-list limit, not by the block: every field decoded costs
  at least 32 octets of the limit (an indexed one as much as a literal), so at most
  limit/32 + 1 fields are decoded. Once the list is over the limit decoding stops; the
  rest of the block is only scanned for the literals that enter the table (which
  decide the meaning of later blocks): runs of indexed fields are skipped by one regular
  expression match, literals that do not enter the table are skipped undecoded.
* Memory is bounded by the block, which the connection bounds, and by the table's
  maximum size: a string decodes to at most 8/5 of its coded length, an indexed field
  adds one reference to a shared entry.
* Names and values are latin-1 str, so every octet string round-trips; lengths in octets
  are len() of the str.

encode_headers() is stateless: it never adds to the peer's dynamic table and never uses
Huffman, so a response costs the peer's decoder nothing to keep in step.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .huffman import HuffmanError
from .huffman import decode as huffman_decode

__all__ = ["HeaderDecoder", "HeaderListTooLarge", "HpackError", "encode_headers"]


class HpackError(Exception):
    """A header block that cannot be decoded: a COMPRESSION_ERROR, closing the connection."""


class HeaderListTooLarge(Exception):
    """The decoded header list is over max_header_list_size: an error of its stream only.

    Not an HpackError: the whole block was decoded, so the dynamic table is still in
    step with the peer's and the connection can carry on.
    """


# RFC 7541 Appendix A.
_STATIC_TABLE: tuple[tuple[str, str], ...] = (
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    *((":status", code) for code in ("200", "204", "206", "304", "400", "404", "500")),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    *(
        (name, "")
        for name in (
            "accept-language", "accept-ranges", "accept", "access-control-allow-origin",
            "age", "allow", "authorization", "cache-control", "content-disposition",
            "content-encoding", "content-language", "content-length", "content-location",
            "content-range", "content-type", "cookie", "date", "etag", "expect", "expires",
            "from", "host", "if-match", "if-modified-since", "if-none-match", "if-range",
            "if-unmodified-since", "last-modified", "link", "location", "max-forwards",
            "proxy-authenticate", "proxy-authorization", "range", "referer", "refresh",
            "retry-after", "server", "set-cookie", "strict-transport-security",
            "transfer-encoding", "user-agent", "vary", "via", "www-authenticate",
        )
    ),
)  # fmt: skip
_STATIC_COUNT = len(_STATIC_TABLE)  # 61; the dynamic table's entries are numbered 62 on
_ENTRY_OVERHEAD = 32  # RFC 7541 4.1: an entry's size is its octets plus 32

# The decoder's fast path, by first octet: an indexed field of the static table (0x81 to
# 0xBD) and its size. Other octets hold a placeholder, never read.
_STATIC_BY_OCTET: tuple[tuple[str, str], ...] = (
    *((("", ""),) * 0x81),
    *_STATIC_TABLE,
    *((("", ""),) * (0x100 - 0x81 - _STATIC_COUNT)),
)
_STATIC_SIZE_BY_OCTET: tuple[int, ...] = tuple(
    len(n) + len(v) + _ENTRY_OVERHEAD for n, v in _STATIC_BY_OCTET
)
_FIRST_DYNAMIC = 0x80 | (_STATIC_COUNT + 1)  # 0xBE, the indexed field 62

# Far more than any length, index or table size a block can carry; bounds the work and
# the numbers a hostile integer can make.
_MAX_INTEGER = 2**28
_MAX_CONTINUATION_OCTETS = 5

# A run of indexed fields (6.1), as skipped past the list's limit: an octet 0x81 to 0xFE,
# or 0xFF and its integer's continuation octets (at most five, the last below 0x80). An
# index past the tables' end goes unnoticed there: it would change nothing.
_INDEXED_RUN = re.compile(rb"(?:[\x81-\xfe]+|\xff[\x80-\xff]{0,4}[\x00-\x7f])*")


class HeaderDecoder:
    """Decodes the header blocks of one connection, in the order they arrive."""

    __slots__ = ("_capacity", "_max_list_size", "_max_table_size", "_sizes", "_table", "_used")

    def __init__(self, *, max_table_size: int = 4096, max_header_list_size: int = 16384) -> None:
        if max_table_size < 0 or max_header_list_size < 0:
            raise ValueError("HPACK limits must not be negative")
        # The SETTINGS_HEADER_TABLE_SIZE we advertised: the most a size update may ask.
        self._max_table_size = max_table_size
        self._max_list_size = max_header_list_size
        self._capacity = max_table_size  # the size in effect; the peer may lower it
        # Newest first, so index 62 is [0]; entries are the very tuples decode() returns.
        self._table: list[tuple[str, str]] = []
        self._sizes: list[int] = []  # each entry's RFC size, in step with _table
        self._used = 0  # the sum of _sizes

    @property
    def dynamic_table(self) -> tuple[tuple[str, str], ...]:
        """The dynamic table's entries, newest (index 62) first."""
        return tuple(self._table)

    @property
    def dynamic_table_size(self) -> int:
        """The table's size by RFC 7541 4.1 (octets of each entry plus 32)."""
        return self._used

    @property
    def table_capacity(self) -> int:
        """The table's maximum size now in effect (after the peer's size updates)."""
        return self._capacity

    def decode(self, block: bytes | memoryview) -> list[tuple[str, str]]:
        """The header list of one complete block, in order.

        Raises HpackError if the block cannot be decoded (the connection must close), and
        HeaderListTooLarge if the list is over the limit (the block's fields that enter
        the table have then entered it).
        """
        data = block if type(block) is bytes else bytes(block)
        end = len(data)
        pos = 0

        # Size updates may only come first (RFC 7541 4.2); there may be more than one.
        while pos < end and data[pos] & 0xE0 == 0x20:
            size = data[pos] & 0x1F
            pos += 1
            if size == 0x1F:
                size, pos = _integer(data, pos, size)
            if size > self._max_table_size:
                raise HpackError(
                    f"dynamic table size update to {size} is over the "
                    f"{self._max_table_size} allowed by SETTINGS_HEADER_TABLE_SIZE"
                )
            self._capacity = size
            self._evict(size)

        static, static_sizes = _STATIC_BY_OCTET, _STATIC_SIZE_BY_OCTET
        table, sizes = self._table, self._sizes
        limit = self._max_list_size
        headers: list[tuple[str, str]] = []
        append = headers.append
        list_size = 0
        skip_indexed = _INDEXED_RUN.match
        while pos < end:
            if list_size > limit:
                # Over the limit: nothing more is kept; indexed fields change nothing.
                pos = skip_indexed(data, pos).end()  # type: ignore[union-attr]
                if pos >= end:
                    break
            octet = data[pos]
            pos += 1
            # Indexed fields (6.1) first, the common case kept short: the dynamic table's
            # (0xBE on), then the static table's (0x81 to 0xBD).
            if octet >= _FIRST_DYNAMIC:
                if octet == 0xFF:
                    index, pos = _integer(data, pos, 0x7F)
                    index -= _STATIC_COUNT + 1
                else:
                    index = octet - _FIRST_DYNAMIC
                try:
                    field = table[index]
                except IndexError:
                    raise HpackError(self._bad_index(index + _STATIC_COUNT + 1)) from None
                list_size += sizes[index]
                if list_size <= limit:
                    append(field)
                continue
            if octet > 0x80:
                list_size += static_sizes[octet]
                if list_size <= limit:
                    append(static[octet])
                continue
            if octet == 0x80:
                raise HpackError("indexed header field with index 0")

            # A literal field (6.2): its name an index or a string, then its value.
            if octet & 0x40:  # with incremental indexing
                indexing = True
                index = octet & 0x3F
                if index == 0x3F:
                    index, pos = _integer(data, pos, index)
            elif octet & 0x20:
                raise HpackError(
                    "dynamic table size update after a header field "
                    "(allowed only at the start of a block)"
                )
            else:  # without indexing (6.2.2) or never indexed (6.2.3): alike to us
                indexing = False
                index = octet & 0x0F
                if index == 0x0F:
                    index, pos = _integer(data, pos, index)
            name_huffman, name_start, name_stop = False, 0, 0
            if index > _STATIC_COUNT:
                try:
                    name = table[index - _STATIC_COUNT - 1][0]
                except IndexError:
                    raise HpackError(self._bad_index(index)) from None
                least = len(name)
            elif index:
                name = _STATIC_TABLE[index - 1][0]
                least = len(name)
            else:
                name = ""
                name_huffman, name_start, pos = _string(data, pos, end, "name")
                name_stop = pos
                least = _least_length(name_huffman, name_stop - name_start)
            # The value's string literal, as _string() reads it, inline for speed.
            if pos >= end:
                raise HpackError("header value missing at the end of the block")
            octet = data[pos]
            length = octet & 0x7F
            pos += 1
            if length == 0x7F:
                length, pos = _integer(data, pos, length)
            value_start = pos
            pos += length
            if pos > end:
                raise HpackError(
                    f"header value of {length} octets runs {pos - end} past the block's end"
                )
            value_huffman = octet > 0x7F
            least += _ENTRY_OVERHEAD + (length * 8 // 30 if value_huffman else length)

            if not indexing and list_size + least > limit:
                # Not kept (the list is too large) and not entering the table: skipped
                # undecoded. A bad Huffman string here then goes unnoticed, which is
                # harmless: it could change nothing.
                list_size += least
                continue
            # A field entering the table is decoded even when the list is too large: its
            # content decides the table's, and so the meaning of later blocks.
            if not index:
                name = _text(data, name_huffman, name_start, name_stop, "name")
            if not value_huffman:
                value = data[value_start:pos].decode("latin-1")
            else:
                try:
                    value = huffman_decode(data[value_start:pos]).decode("latin-1")
                except HuffmanError as error:
                    raise HpackError(f"header value: {error}") from None
            field = (name, value)
            size = len(name) + len(value) + _ENTRY_OVERHEAD
            list_size += size
            if list_size <= limit:
                append(field)
            if indexing:
                self._add(field, size)

        if list_size > limit:
            raise HeaderListTooLarge(
                f"header list of at least {list_size} octets (names, values and 32 per field) "
                f"is over the {limit} allowed by SETTINGS_MAX_HEADER_LIST_SIZE"
            )
        return headers

    def _bad_index(self, index: int) -> str:
        return (
            f"index {index} is past the tables' end "
            f"({_STATIC_COUNT} static + {len(self._table)} dynamic entries)"
        )

    def _add(self, field: tuple[str, str], size: int) -> None:
        # RFC 7541 4.4: evict oldest first until the entry fits; an entry larger than the
        # whole table empties it and is not added.
        if size > self._capacity:
            self._evict(0)
            return
        self._evict(self._capacity - size)
        self._table.insert(0, field)
        self._sizes.insert(0, size)
        self._used += size

    def _evict(self, keep: int) -> None:
        """Evicts the oldest entries until the table's size is at most keep."""
        table, sizes = self._table, self._sizes
        while self._used > keep:
            table.pop()
            self._used -= sizes.pop()


def _integer(data: bytes, pos: int, value: int) -> tuple[int, int]:
    """An integer whose prefix was all ones (value): adds the continuation octets at pos."""
    end = len(data)
    shift = 0
    for _ in range(_MAX_CONTINUATION_OCTETS):
        if pos >= end:
            raise HpackError("integer runs past the end of the block")
        octet = data[pos]
        pos += 1
        value += (octet & 0x7F) << shift
        if not octet & 0x80:
            if value > _MAX_INTEGER:
                raise HpackError(f"integer {value} is over the limit of {_MAX_INTEGER}")
            return value, pos
        shift += 7
    raise HpackError(f"integer has more than {_MAX_CONTINUATION_OCTETS} continuation octets")


def _string(data: bytes, pos: int, end: int, what: str) -> tuple[bool, int, int]:
    """The string literal (5.2) at pos: whether Huffman-coded, and where its octets are."""
    if pos >= end:
        raise HpackError(f"header {what} missing at the end of the block")
    octet = data[pos]
    length = octet & 0x7F
    pos += 1
    if length == 0x7F:
        length, pos = _integer(data, pos, length)
    if pos + length > end:
        raise HpackError(
            f"header {what} of {length} octets runs {pos + length - end} past the block's end"
        )
    return bool(octet & 0x80), pos, pos + length


def _least_length(huffman_coded: bool, coded: int) -> int:
    """The fewest octets a string of `coded` octets can decode to."""
    # Huffman codes are at most 30 bits long. (decode() has a copy of this.)
    return coded * 8 // 30 if huffman_coded else coded


def _text(data: bytes, huffman_coded: bool, start: int, stop: int, what: str) -> str:
    if not huffman_coded:
        return data[start:stop].decode("latin-1")
    try:
        return huffman_decode(data[start:stop]).decode("latin-1")
    except HuffmanError as error:
        raise HpackError(f"header {what}: {error}") from None


def _put_integer(out: bytearray, first: int, prefix_bits: int, value: int) -> None:
    """Appends value as an integer with a prefix of prefix_bits (5.1), flags in first."""
    top = (1 << prefix_bits) - 1
    if value < top:
        out.append(first | value)
        return
    out.append(first | top)
    value -= top
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _prefix_octets(first: int, prefix_bits: int, value: int) -> bytes:
    out = bytearray()
    _put_integer(out, first, prefix_bits, value)
    return bytes(out)


# The encoder's lookups: a whole field as its indexed representation (6.1), and a name as
# the first octets of a literal without indexing with that indexed name (6.2.2).
_FIELD_OCTETS: dict[tuple[str, str], bytes] = {}
_NAME_OCTETS: dict[str, bytes] = {}
for _index, _field in enumerate(_STATIC_TABLE, 1):
    _FIELD_OCTETS.setdefault(_field, _prefix_octets(0x80, 7, _index))
    _NAME_OCTETS.setdefault(_field[0], _prefix_octets(0x00, 4, _index))
del _index, _field


def encode_headers(headers: Iterable[tuple[str, str]]) -> bytes:
    """A header block for headers: static-table references and raw literals only."""
    out = bytearray()
    for name, value in headers:
        octets = _FIELD_OCTETS.get((name, value))
        if octets is not None:
            out += octets
            continue
        octets = _NAME_OCTETS.get(name)
        if octets is None:
            out.append(0x00)  # literal without indexing, new name
            raw = name.encode("latin-1")
            _put_integer(out, 0x00, 7, len(raw))
            out += raw
        else:
            out += octets
        raw = value.encode("latin-1")
        _put_integer(out, 0x00, 7, len(raw))
        out += raw
    return bytes(out)
