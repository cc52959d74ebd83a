"""error_text: how errors show what a user sent."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.error_text import MESSAGE_LIMIT, QUOTE_LIMIT, bounded, quoted, shortened


@given(st.text())
def test_quoted_shows_a_short_prefix_and_says_how_long_the_text_was(text):
    shown = quoted(text)
    if len(text) <= QUOTE_LIMIT:
        assert shown == repr(text)
    else:
        assert shown.startswith(repr(text[:QUOTE_LIMIT]))
        assert shown.endswith(f"({len(text)} characters)")
        assert len(shown) <= len(repr(text[:QUOTE_LIMIT])) + 30


@given(st.text())
def test_shortened_keeps_short_text_as_it_is(text):
    shown = shortened(text)
    if len(text) <= QUOTE_LIMIT:
        assert shown == text
    else:
        assert shown == f"{text[:QUOTE_LIMIT]}… ({len(text)} characters)"


@given(st.text(), st.integers(8, 4 * MESSAGE_LIMIT))
def test_bounded_fits_the_limit_in_utf8_and_keeps_whole_characters(message, limit):
    cut = bounded(message, limit)
    assert len(cut.encode()) <= limit
    if len(message.encode()) <= limit:
        assert cut == message
    else:
        assert message.startswith(cut.removesuffix("…"))
