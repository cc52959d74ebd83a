"""BodyVerdicts: the read path's remembered check of bodies flagged compressed."""

from __future__ import annotations

import gzip
import zlib

from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.wire.compressed_body import BodyVerdicts, compressed_body_problem

LIMIT = 4096

bodies = st.one_of(
    st.binary(max_size=256),
    st.binary(max_size=2 * LIMIT).map(zlib.compress),
    st.binary(max_size=2 * LIMIT).map(gzip.compress),
    # Good data cut short, or with bytes after it.
    st.binary(min_size=1, max_size=LIMIT).map(lambda b: zlib.compress(b)[:-3]),
    st.binary(max_size=LIMIT).map(lambda b: zlib.compress(b) + b"trailing"),
)


@given(body=bodies, position=st.integers(0, 2**40), body_crc=st.integers(0, 2**32 - 1))
def test_a_verdict_is_the_checks_own_first_time_and_every_time_after(body, position, body_crc):
    verdicts = BodyVerdicts(capacity=8)
    expected = compressed_body_problem(body, LIMIT)
    for _ in range(3):
        assert verdicts.problem(body, LIMIT, position=position, body_crc=body_crc) == expected


def test_a_record_rewritten_at_the_same_position_is_judged_afresh():
    verdicts = BodyVerdicts(capacity=8)
    good = zlib.compress(b"fine")
    assert verdicts.problem(good, LIMIT, position=100, body_crc=zlib.crc32(good)) is None
    bad = b"not zlib"
    problem = verdicts.problem(bad, LIMIT, position=100, body_crc=zlib.crc32(bad))
    assert problem is not None and "not zlib or gzip" in problem


def test_the_limit_is_part_of_the_verdict():
    verdicts = BodyVerdicts(capacity=8)
    body = zlib.compress(bytes(LIMIT * 2))
    crc = zlib.crc32(body)
    assert verdicts.problem(body, LIMIT * 2, position=0, body_crc=crc) is None
    assert "inflates to more than" in verdicts.problem(body, LIMIT, position=0, body_crc=crc)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=200))
def test_capacity_bounds_what_is_remembered_and_verdicts_stay_right(positions):
    verdicts = BodyVerdicts(capacity=4)
    good, bad = zlib.compress(b"x"), b"bad"
    for position in positions:
        body = good if position % 2 else bad
        problem = verdicts.problem(body, LIMIT, position=position, body_crc=position)
        assert (problem is None) == (body is good)
        assert len(verdicts) <= 4
