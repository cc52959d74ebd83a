"""The HPACK Huffman code (RFC 7541 section 5.2 and Appendix B).

decode() accepts exactly the strings section 5.2 allows: whole codes, then at most 7 bits
of padding, and that padding is the leading bits of EOS (all ones); EOS itself never
appears. Anything else raises HuffmanError, which the caller turns into a
COMPRESSION_ERROR.

decode() is a finite-state machine over whole octets: one table lookup per input octet,
no per-bit work in Python. A state is a node of the code tree (the bits read since the
last complete code); the tables are built here at import from the code lengths below,
in some 20 ms, and take about 2 MB.
"""

from __future__ import annotations

__all__ = ["HuffmanError", "decode", "encode"]


class HuffmanError(ValueError):
    """A Huffman-coded string that section 5.2 of RFC 7541 does not allow."""


_EOS = 256

# The code of Appendix B is canonical: listed by (length, symbol), each code is the one
# before it plus one, shifted left by the growth in length, starting from all zeros. So
# the length of each symbol's code is all the table holds. Each line is a code length
# then the symbols (octet values; 256 is EOS) with that length.
_SYMBOLS_BY_LENGTH = """
 5: 48-50 97 99 101 105 111 115-116
 6: 32 37 45-47 51-57 61 65 95 98 100 102-104 108-110 112 114 117
 7: 58 66-87 89 106-107 113 118-122
 8: 38 42 44 59 88 90
10: 33-34 40-41 63
11: 39 43 124
12: 35 62
13: 0 36 64 91 93 126
14: 94 125
15: 60 96 123
19: 92 195 208
20: 128 130-131 162 184 194 224 226
21: 153 161 167 172 176-177 179 209 216-217 227 229-230
22: 129 132-134 136 146 154 156 160 163-164 169-170 173 178 181 185-187 189-190 196 198
    228 232-233
23: 1 135 137-141 143 147 149-152 155 157-158 165-166 168 174-175 180 182-183 188 191 197
    231 239
24: 9 142 144-145 148 159 171 206 215 225 236-237
25: 199 207 234-235
26: 192-193 200-202 205 210 213 218-219 238 240 242-243 255
27: 203-204 211-212 214 221-223 241 244-248 250-254
28: 2-8 11-12 14-21 23-31 127 220 249
30: 10 13 22 256
"""


def _code_lengths(text: str) -> tuple[int, ...]:
    lengths: dict[int, int] = {}
    length = 0
    for word in text.split():
        if word.endswith(":"):
            length = int(word[:-1])
            continue
        first, _, last = word.partition("-")
        for symbol in range(int(first), int(last or first) + 1):
            if symbol in lengths:
                raise AssertionError(f"symbol {symbol} listed twice")
            lengths[symbol] = length
    if sorted(lengths) != list(range(_EOS + 1)):
        raise AssertionError("the code must list each of the 257 symbols once")
    # A complete prefix code (every bit string decodes or is a prefix of a code): the
    # tree below then has no empty branch, so the decoder needs no "invalid code" state.
    if sum(2 ** (30 - n) for n in lengths.values()) != 2**30:
        raise AssertionError("the code lengths do not make a complete prefix code")
    return tuple(lengths[symbol] for symbol in range(_EOS + 1))


def _canonical_codes(lengths: tuple[int, ...]) -> tuple[int, ...]:
    """Each symbol's code, given each symbol's code length (the rule above)."""
    codes = [0] * len(lengths)
    code = -1
    previous = 0
    for symbol in sorted(range(len(lengths)), key=lambda s: (lengths[s], s)):
        code = (code + 1) << (lengths[symbol] - previous)
        previous = lengths[symbol]
        codes[symbol] = code
    return tuple(codes)


_LENGTHS = _code_lengths(_SYMBOLS_BY_LENGTH)
_CODES = _canonical_codes(_LENGTHS)


def _build_tree() -> tuple[list[list[int]], list[int], list[bool]]:
    """The code tree: internal nodes 0.. (0 the root); a child < 0 is the leaf ~symbol.

    Also each node's depth and whether the path to it is all ones (a valid padding).
    """
    children: list[list[int]] = [[0, 0]]
    depth = [0]
    all_ones = [True]
    for symbol, (code, length) in enumerate(zip(_CODES, _LENGTHS, strict=True)):
        node = 0
        for shift in range(length - 1, 0, -1):
            bit = (code >> shift) & 1
            if not children[node][bit]:
                children.append([0, 0])
                depth.append(depth[node] + 1)
                all_ones.append(all_ones[node] and bit == 1)
                children[node][bit] = len(children) - 1
            node = children[node][bit]
        children[node][code & 1] = ~symbol
    return children, depth, all_ones


def _build_tables() -> tuple[tuple[int, ...], tuple[bytes, ...], tuple[str | None, ...]]:
    children, depth, all_ones = _build_tree()
    dead = len(children)  # after EOS: stays there, and the end check reports it
    states = dead + 1

    # Four bits per step first: codes are at least 5 bits long, so a nibble completes at
    # most one code. For each state and nibble: the next state and the symbol completed
    # (-1 for none).
    nibble_next: list[list[int]] = []
    nibble_symbol: list[list[int]] = []
    for state in range(states):
        next_row, symbol_row = [], []
        for value in range(16):
            node, completed = state, -1
            if state != dead:
                for shift in (3, 2, 1, 0):
                    child = children[node][(value >> shift) & 1]
                    if child >= 0:
                        node = child
                    elif ~child == _EOS:
                        node = dead
                        break
                    else:
                        node, completed = 0, ~child
            next_row.append(node)
            symbol_row.append(completed)
        nibble_next.append(next_row)
        nibble_symbol.append(symbol_row)

    # Then two nibbles per octet, as two flat tables indexed by state << 8 | octet: the
    # next state (shifted left 8, ready to take the next octet), and the octets completed.
    # Equal objects in them are shared, so the tables take about 2 MB.
    shifted = [state << 8 for state in range(states)]
    singles = [bytes((symbol,)) for symbol in range(256)] + [b""]  # [-1] is b""
    next_rows = [tuple(shifted[n] for n in row) for row in nibble_next]
    single_rows = [tuple(singles[s] for s in row) for row in nibble_symbol]
    pairs: dict[bytes, bytes] = {}
    pair_rows: dict[tuple[int, int], tuple[bytes, ...]] = {}
    next_table: list[int] = []
    piece_table: list[bytes] = []
    for state in range(states):
        for middle, first in zip(nibble_next[state], nibble_symbol[state], strict=True):
            next_table.extend(next_rows[middle])
            if first < 0:
                piece_table.extend(single_rows[middle])
                continue
            row = pair_rows.get((first, middle))
            if row is None:
                row = pair_rows[first, middle] = tuple(
                    pairs.setdefault(pair, pair)
                    for pair in (singles[first] + singles[s] for s in nibble_symbol[middle])
                )
            piece_table.extend(row)
    # One more entry, past the end: decode starts from it, and it leads to the root.
    next_table.append(0)

    end_problem: list[str | None] = []
    for state in range(states):
        if state == dead:
            end_problem.append("the EOS symbol appears in the string")
        elif not all_ones[state]:
            end_problem.append("the padding is not the leading bits of EOS (all ones)")
        elif depth[state] > 7:
            end_problem.append(f"the padding is {depth[state]} bits long, more than 7")
        else:
            end_problem.append(None)
    return tuple(next_table), tuple(piece_table), tuple(end_problem)


_NEXT, _PIECE, _END_PROBLEM = _build_tables()
_START = len(_PIECE)  # the extra entry of _NEXT


def decode(data: bytes | memoryview) -> bytes:
    """The octets Huffman-coded in data; HuffmanError if data is not a valid coding."""
    next_state, piece = _NEXT, _PIECE
    index = _START
    pieces: list[bytes] = []
    append = pieces.append
    for octet in data:
        index = next_state[index] | octet
        append(piece[index])
    problem = _END_PROBLEM[next_state[index] >> 8]
    if problem is not None:
        raise HuffmanError(f"bad Huffman string: {problem}")
    return b"".join(pieces)


def encode(data: bytes) -> bytes:
    """data Huffman-coded, padded with the leading bits of EOS to a whole octet."""
    codes, lengths = _CODES, _LENGTHS
    out = bytearray()
    pending = 0  # bits not yet written, in the low `count` bits
    count = 0
    for octet in data:
        count += lengths[octet]
        pending = (pending << lengths[octet]) | codes[octet]
        while count >= 8:
            count -= 8
            out.append((pending >> count) & 0xFF)
        pending &= (1 << count) - 1
    if count:
        out.append(((pending << (8 - count)) | (0xFF >> count)) & 0xFF)
    return bytes(out)
