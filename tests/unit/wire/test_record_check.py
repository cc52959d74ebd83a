"""wire.record_check: the one validator, its reasons, and what the encoder produces.

Every case builds its record with wire's encoder and damages exactly one thing,
so each reason and each "can the records after it still be found" answer is
pinned to one rule.
"""

from __future__ import annotations

import zlib
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skiff_broker.wire import record_check
from skiff_broker.wire.properties import encode_properties, properties_problem
from skiff_broker.wire.record_check import (
    RecordProblem,
    RunCheck,
    check_record,
    check_run,
    record_starts,
)
from skiff_broker.wire.record_codec import (
    CorruptRecordError,
    decode_record,
    encode_record_into,
    topic_field,
)
from skiff_broker.wire.record_layout import (
    BLANK_MAGIC,
    LONG,
    MESSAGE_MAGIC,
    PHYSICAL_OFFSET_OFFSET,
    PLAIN_HEADER,
    SIZE_MAGIC,
)

HEADER = PLAIN_HEADER.size


def record(
    topic: bytes = b"orders",
    body: bytes = b"hello",
    properties: bytes = b"UNIQ_KEY\x01ID1\x02",
    *,
    born_host: bytes = bytes(8),
) -> bytes:
    """A record with these raw fields (not checked: tests damage them on purpose)."""
    blob = bytearray()
    field = bytes((len(topic),)) + topic
    encode_record_into(blob, field, body, properties, 0, 0, 0, 1, born_host, bytes(8), 0, 0)
    return bytes(blob)


def problem_of(data: bytes, **kwargs: object) -> RecordProblem:
    checked = check_record(data, 0, len(data), **kwargs)  # type: ignore[arg-type]
    assert isinstance(checked, RecordProblem), "the record was accepted"
    # The batch walker reaches the same verdict as the single-record check.
    run = check_run(data, 0, len(data), **kwargs)  # type: ignore[arg-type]
    assert run.problem == checked and run.stop == 0 and run.records == 0
    return checked


def test_a_well_formed_record_is_accepted_whole() -> None:
    data = record()
    assert check_record(data, 0, len(data)) == len(data)
    assert check_run(data * 3, 0, 3 * len(data)) == (3 * len(data), 3, None)


@pytest.mark.parametrize(
    ("properties", "why"),
    [
        (b"UNIQ_KEY\x01ID1", "incomplete"),  # the record: no closing \x02
        (b"UNIQ_KEY\x01ID1\x02TAGS\x01a", "incomplete"),
        (b"UNIQ_KEY\x02", "pairs"),  # no \x01
        (b"\x01value\x02", "pairs"),  # empty name
        (b"A\x01b\x01c\x02", "pairs"),  # two \x01 in one pair
        (b"A\x01b\x02\x02", "pairs"),  # an empty pair
        (b"A\x01\xff\xfe\x02", "UTF-8"),
    ],
)
def test_properties_that_are_not_pairs_are_refused_but_framing_holds(
    properties: bytes, why: str
) -> None:
    problem = problem_of(record(properties=properties))
    assert why in problem.reason
    assert problem.framing_holds and not problem.incomplete


def test_a_bad_pair_is_named_by_its_byte() -> None:
    data = record(properties=b"A\x01b\x02UNIQ\x02")
    problem = problem_of(data)
    properties_at = len(data) - len(b"A\x01b\x02UNIQ\x02")
    assert f"byte {properties_at + 4}" in problem.reason


@pytest.mark.parametrize(
    ("topic", "why"),
    [(b"", "empty"), (b"orders\x00", "incomplete"), (b"\xc3(", "UTF-8")],
)
def test_bad_topics_are_refused(topic: bytes, why: str) -> None:
    problem = problem_of(record(topic=topic))
    assert why in problem.reason and problem.framing_holds


def test_empty_properties_and_non_ascii_text_are_accepted() -> None:
    for data in (
        record(properties=b""),
        record(topic="commandes-été".encode(), properties="clé\x01välue\x02".encode()),
        record(properties=b"A\x01\x02"),  # an empty value is a value
    ):
        assert check_record(data, 0, len(data)) == len(data)
        assert check_run(data, 0, len(data)).problem is None


def test_body_crc_is_checked_unless_skipped() -> None:
    data = bytearray(record())
    data[HEADER] ^= 0x01
    problem = problem_of(bytes(data))
    assert "CRC" in problem.reason and problem.framing_holds
    assert check_record(bytes(data), 0, len(data), check_crc=False) == len(data)


def test_physical_offset_is_checked_when_the_place_is_known() -> None:
    data = bytearray(record())
    data[PHYSICAL_OFFSET_OFFSET : PHYSICAL_OFFSET_OFFSET + 8] = (4096).to_bytes(8, "big")
    assert check_record(bytes(data), 0, len(data), base=4096) == len(data)
    problem = problem_of(bytes(data), base=8192)
    assert problem.position == 8192 and "claims offset 4096" in problem.reason


@pytest.mark.parametrize("keep", [1, 7, 8, 40, HEADER, -1])
def test_a_cut_record_is_incomplete_and_its_framing_unknown(keep: int) -> None:
    data = record()[:keep]
    problem = problem_of(data)
    assert problem.incomplete and not problem.framing_holds
    assert "cut short" in problem.reason


def test_lengths_that_disagree_with_the_size_break_framing() -> None:
    data = bytearray(record())
    data[HEADER - 4 : HEADER] = (1000).to_bytes(4, "big")  # body length
    assert not problem_of(bytes(data)).framing_holds
    data = bytearray(record())
    data[-len(b"UNIQ_KEY\x01ID1\x02") - 1] += 1  # properties length
    assert not problem_of(bytes(data)).framing_holds


def test_a_blank_or_zeros_are_not_messages() -> None:
    blank = SIZE_MAGIC.pack(64, BLANK_MAGIC) + bytes(56)
    assert "magic" in problem_of(blank).reason
    assert "magic" in problem_of(bytes(200)).reason


def test_a_run_stops_at_its_first_bad_record_and_counts_the_good_ones() -> None:
    good = record()
    bad = record(properties=b"UNIQ_KEY\x01ID1")
    run = good + good + bad + good
    checked = check_run(run, 0, len(run))
    assert (checked.stop, checked.records) == (2 * len(good), 2)
    assert checked.problem is not None and checked.problem.position == 2 * len(good)
    # A caller that trusts the framing steps over it and goes on.
    rest = check_run(run, checked.stop + len(bad), len(run))
    assert rest == (len(run), 1, None)


def test_ipv6_hosts_go_the_same_way() -> None:
    data = record(born_host=bytes(20))
    assert check_record(data, 0, len(data)) == len(data)
    assert check_run(data, 0, len(data)).problem is None
    assert "incomplete" in problem_of(record(properties=b"A\x01b", born_host=bytes(20))).reason


def test_decode_record_refuses_what_the_validator_refuses() -> None:
    message = decode_record(record(properties=b"A\x01b\x02UNIQ_KEY\x01X\x02"))
    assert (message.topic, message.body, message.properties) == (
        "orders",
        b"hello",
        {"A": "b", "UNIQ_KEY": "X"},
    )
    with pytest.raises(CorruptRecordError, match="incomplete"):
        decode_record(record(properties=b"UNIQ_KEY\x01X"))


def test_property_names_and_values_that_cannot_be_stored() -> None:
    assert properties_problem({"": "x"}) is not None
    assert properties_problem({"a\x01": "x"}) is not None
    assert properties_problem({"a": "x\x02"}) is not None
    assert properties_problem({"a": "", "b": "é"}) is None
    for bad in ({"": "x"}, {"a": "x\x01y"}, {"a\x02": "y"}):
        with pytest.raises(ValueError, match=r"property|name"):
            encode_properties(bad)
    for name in ("", "x" * 128, "t\x00"):
        with pytest.raises(ValueError, match="topic"):
            topic_field(name)


_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    topic=st.text(st.characters(codec="utf-8"), min_size=1, max_size=40),
    body=st.binary(max_size=300),
    properties=st.dictionaries(_TEXT, _TEXT, max_size=5),
    ipv6=st.booleans(),
)
def test_whatever_the_encoder_writes_the_validator_accepts(
    topic: str, body: bytes, properties: dict[str, str], ipv6: bool
) -> None:
    """The encoder either refuses its input with a reason or writes a record that passes."""
    try:
        field = topic_field(topic)
        encoded = encode_properties(properties)
    except ValueError:
        assert properties_problem(properties) is not None or not _storable_topic(topic)
        return
    blob = bytearray()
    host = bytes(20) if ipv6 else bytes(8)
    size = encode_record_into(blob, field, body, encoded, 3, 0, 0, 1, host, host, 0, 0)
    assert check_record(bytes(blob), 0, len(blob)) == size == len(blob)
    assert check_run(bytes(blob), 0, len(blob)).problem is None
    decoded = decode_record(bytes(blob))
    assert (decoded.topic, decoded.body, decoded.properties) == (topic, body, properties)


def _storable_topic(topic: str) -> bool:
    raw = topic.encode("utf-8", "surrogatepass")
    return 0 < len(raw) <= 127 and not raw.endswith(b"\x00")


def test_body_crc_is_rocketmqs() -> None:
    data = record(body=b"abc")
    assert int.from_bytes(data[8:12], "big") == zlib.crc32(b"abc") & 0x7FFFFFFF
    assert int.from_bytes(data[4:8], "big") == MESSAGE_MAGIC


@settings(max_examples=300, deadline=None)
@given(
    st.binary(min_size=1, max_size=40),
    st.binary(max_size=40),
    st.binary(max_size=60),
    st.integers(0, 400),
    st.integers(0, 255),
)
def test_the_read_paths_check_is_the_full_check_less_the_text_rules(
    topic: bytes, body: bytes, properties: bytes, flip_at: int, flip: int
) -> None:
    """text=False (fetch, the client decoder) refuses a subset of what the full check refuses.

    Both agree on framing and body CRC; only the topic and properties bytes are
    left to lenient decoding. A run stops at the same record either way whenever
    the full check's reason is not about text.
    """
    data = bytearray(record(topic[:127], body, properties))
    if flip_at < len(data):
        data[flip_at] ^= flip
    data = bytes(data)
    full = check_record(data, 0, len(data))
    lean = check_record(data, 0, len(data), text=False)
    if isinstance(full, int):
        assert lean == full
    if isinstance(lean, RecordProblem):
        assert isinstance(full, RecordProblem)
        assert lean.framing_holds == full.framing_holds
    assert check_run(data, 0, len(data), text=False).problem == (
        lean if isinstance(lean, RecordProblem) else None
    )


def test_the_read_paths_check_passes_text_it_cannot_vouch_for() -> None:
    data = record(properties=b"UNIQ_KEY\x01\xff\xfe\x02")
    assert "UTF-8" in problem_of(data).reason
    assert check_record(data, 0, len(data), text=False) == len(data)
    assert check_run(data, 0, len(data), text=False).records == 1


def _record_by_record(data: bytes, base: int | None, check_crc: bool) -> RunCheck:
    """What ``check_run(text=False)`` means: ``check_record`` on each record in turn."""
    position = records = 0
    while position < len(data):
        checked = check_record(
            data, position, len(data), base=base, check_crc=check_crc, text=False
        )
        if isinstance(checked, RecordProblem):
            return RunCheck(position, records, checked)
        position += checked
        records += 1
    return RunCheck(position, records, None)


def _long_run(bodies: list[int], ipv6: set[int], base: int | None) -> tuple[bytearray, list[int]]:
    """Records back to back (IPv6 born hosts at the indexes in ``ipv6``), placed at
    ``base`` in the log when it is given, and where each starts."""
    run = bytearray()
    starts = []
    for index, body_length in enumerate(bodies):
        at = len(run)
        starts.append(at)
        run += record(
            body=bytes([index % 251]) * body_length,
            born_host=bytes(20) if index in ipv6 else bytes(8),
        )
        if base is not None:
            LONG.pack_into(run, at + PHYSICAL_OFFSET_OFFSET, base + at)
    return run, starts


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 700), min_size=70, max_size=160),
    st.sets(st.integers(0, 159), max_size=3),
    # (record, from its start or its end, how far, xor): the header's fields and the
    # topic and properties lengths at the end are where framing can break.
    st.lists(
        st.tuples(
            st.integers(0, 159), st.booleans(), st.integers(0, HEADER + 4), st.integers(1, 255)
        ),
        max_size=3,
    ),
    st.one_of(st.none(), st.integers(0, 1 << 40)),
    st.booleans(),
    st.one_of(st.just(0), st.integers(1, 900)),
)
def test_a_long_runs_check_is_each_records_check_in_turn(
    bodies: list[int],
    ipv6: set[int],
    flips: list[tuple[int, bool, int, int]],
    base: int | None,
    check_crc: bool,
    cut: int,
) -> None:
    """The run check's inline loop reaches the verdict, record and count of checking one
    record after another: damaged anywhere, cut short, with IPv6 hosts among them."""
    data, starts = _long_run(bodies, ipv6, base)
    ends = [*starts[1:], len(data)]
    for index, from_end, distance, flip in flips:
        index %= len(starts)
        at = ends[index] - 1 - distance if from_end else starts[index] + distance
        data[at] ^= flip
    run = bytes(data[: len(data) - cut])
    expected = _record_by_record(run, base, check_crc)
    # Where the records are expected to start is only a guess that speeds the check: the
    # walk's guess, the truth, one off by a byte from the middle on, one that skips a record.
    middle = len(starts) // 2
    shifted = np.array(starts)
    shifted[middle:] += 1
    skipping = np.delete(np.array(starts), middle)
    # Checked all at once whatever the run's length.
    with mock.patch.object(record_check, "_VECTOR_MIN_RECORDS", 1):
        for guess in (None, record_starts(run, 0, len(run)), np.array(starts), shifted, skipping):
            checked = check_run(
                run, 0, len(run), base=base, check_crc=check_crc, text=False, starts=guess
            )
            assert checked == expected


def test_a_long_run_with_a_bad_crc_stops_at_that_record() -> None:
    data, _ = _long_run([300] * 100, set(), base=None)
    second_to_last = len(data) - 2 * len(record(body=bytes(300)))
    data[second_to_last + HEADER] ^= 1
    checked = check_run(bytes(data), 0, len(data), text=False)
    assert (checked.stop, checked.records) == (second_to_last, 98)
    assert checked.problem is not None and "CRC" in checked.problem.reason
    assert check_run(bytes(data), 0, len(data), text=False, check_crc=False).problem is None


@pytest.mark.parametrize(
    "damage",
    ["size", "magic", "crc", "physical", "sys_flag", "body_length", "topic_length", "properties"],
)
def test_each_framing_field_damaged_in_a_long_run_stops_the_check_at_that_record(
    damage: str,
) -> None:
    data, starts = _long_run([200] * 60, set(), base=1 << 20)
    at = starts[40]
    end = starts[41]
    length = HEADER + 200 + 1 + len(b"orders") + 2 + len(b"UNIQ_KEY\x01ID1\x02")
    assert end - at == length
    where = {
        "size": at + 3,
        "magic": at + 5,
        "crc": at + 10,
        "physical": at + PHYSICAL_OFFSET_OFFSET + 7,
        "sys_flag": at + 39,  # a host bit
        "body_length": at + HEADER - 1,
        "topic_length": at + HEADER + 200,
        "properties": end - len(b"UNIQ_KEY\x01ID1\x02") - 1,
    }[damage]
    data[where] ^= 0x10 if damage == "sys_flag" else 0x01
    run = bytes(data)
    expected = _record_by_record(run, 1 << 20, True)
    assert expected.problem is not None and expected.stop == at
    with mock.patch.object(record_check, "_VECTOR_MIN_RECORDS", 1):
        checked = check_run(run, 0, len(run), base=1 << 20, text=False, starts=np.array(starts))
    assert checked == expected


@pytest.mark.parametrize("length", [0, 5, 40, 90, 91, 95])
def test_a_run_shorter_than_a_header_gets_the_loops_verdict_whatever_the_starts(
    length: int,
) -> None:
    data = record()[:length]
    with mock.patch.object(record_check, "_VECTOR_MIN_RECORDS", 1):
        checked = check_run(data, 0, length, text=False, starts=np.array([0]))
    assert checked == check_run(data, 0, length, text=False)
