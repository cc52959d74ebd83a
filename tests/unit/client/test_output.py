import base64

import click
import pytest

from skiff_broker.commands.options import Timestamp
from skiff_broker.commands.output import body_text, table, time_text


def test_table_pads_columns_and_right_aligns_numbers():
    text = table(["NAME", "QUEUES", "PERM"], [["orders", 4, "rw"], ["a", 128, "r"]])
    assert text.splitlines() == [
        "NAME    QUEUES  PERM",
        "orders       4  rw",
        "a          128  r",
    ]


@pytest.mark.parametrize(
    ("body", "shown", "encoding"),
    [
        (b"hello", "hello", "utf-8"),
        ("grüße\n".encode(), "grüße\n", "utf-8"),
        (b"\xff\xfe", base64.b64encode(b"\xff\xfe").decode(), "base64"),
        (b"a\x00b", base64.b64encode(b"a\x00b").decode(), "base64"),
    ],
)
def test_bodies_print_as_text_only_when_they_are_text(body, shown, encoding):
    assert body_text(body) == (shown, encoding)


def test_times_are_utc_with_milliseconds():
    assert time_text(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert time_text(0) == "-"


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1700000000123", 1_700_000_000_123),
        ("2023-11-14T22:13:20.123Z", 1_700_000_000_123),
        ("2023-11-14T23:13:20.123+01:00", 1_700_000_000_123),
    ],
)
def test_times_are_given_as_milliseconds_or_iso(text, ms):
    assert Timestamp().convert(text, None, None) == ms


def test_a_time_in_another_form_is_a_usage_error():
    with pytest.raises(click.BadParameter, match="ISO time"):
        Timestamp().convert("yesterday", None, None)
