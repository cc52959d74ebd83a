"""The send rules for tags, keys, user properties and message groups, at each limit and past it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.wire.message_rules import (
    MAX_MESSAGE_GROUP_BYTES,
    MAX_USER_PROPERTIES,
    MAX_USER_PROPERTIES_BYTES,
    Problem,
    Refusal,
    message_group_problem,
    message_problem,
    producer_property_problem,
)
from skiff_broker.wire.property_names import KEYS, TAGS, UNIQ_KEY

# Java's ISO control characters: the two ends of both ranges, and the record separators.
CONTROLS = ["\x00", "\x01", "\x02", "\x1f", "\x7f", "\x9f"]
# Just outside those ranges.
NOT_CONTROLS = ["\x20", "\x7e", "\xa0", "é"]


def refusal(problem: Problem | None) -> Refusal | None:
    return None if problem is None else problem.refusal


# -- counts and sizes -----------------------------------------------------------


def test_at_most_128_user_properties() -> None:
    at_limit = {f"p{i}": "v" for i in range(MAX_USER_PROPERTIES)}
    assert message_problem(at_limit, None, []) is None
    past = {**at_limit, "one-more": "v"}
    problem = message_problem(past, None, [])
    assert refusal(problem) is Refusal.TOO_LARGE
    assert problem is not None and "too many user properties, max is 128" in problem.text


def split_bytes(total: int) -> tuple[dict[str, str], str, list[str]]:
    """User properties, a tag and keys whose UTF-8 takes ``total`` bytes together."""
    # Two-byte characters in the value: the limit counts bytes, not characters.
    user = {"name": "é" * 1000}  # 4 + 2000 bytes
    tag = "t" * 100
    keys = ["k" * 200, "x" * (total - 4 - 2000 - 100 - 200)]
    return user, tag, keys


def test_properties_tag_and_keys_together_at_most_16_kib() -> None:
    assert MAX_USER_PROPERTIES_BYTES == 16 * 1024
    assert message_problem(*split_bytes(MAX_USER_PROPERTIES_BYTES)) is None
    problem = message_problem(*split_bytes(MAX_USER_PROPERTIES_BYTES + 1))
    assert refusal(problem) is Refusal.TOO_LARGE
    assert problem is not None
    assert "the total size of user property is too large, max is 16384" in problem.text
    assert "16385 bytes" in problem.text


def test_a_lone_key_or_tag_at_most_16_kib() -> None:
    limit = MAX_USER_PROPERTIES_BYTES
    assert message_problem({}, None, ["k" * limit]) is None
    assert refusal(message_problem({}, None, ["k" * (limit + 1)])) is Refusal.TOO_LARGE
    assert message_problem({}, "t" * limit, []) is None
    assert refusal(message_problem({}, "t" * (limit + 1), [])) is Refusal.TOO_LARGE
    # Counted in bytes of UTF-8: 8,192 two-byte characters are the limit.
    assert message_problem({}, "é" * (limit // 2), []) is None
    assert refusal(message_problem({}, "é" * (limit // 2) + "a", [])) is Refusal.TOO_LARGE


def test_a_message_group_shorter_than_64_bytes() -> None:
    # RocketMQ refuses a group of exactly 64 bytes.
    assert MAX_MESSAGE_GROUP_BYTES == 64
    assert message_group_problem("g" * 63) is None
    problem = message_group_problem("g" * 64)
    assert refusal(problem) is Refusal.GROUP
    assert problem is not None and "message group exceed the max size 64" in problem.text
    assert message_group_problem("é" * 31 + "a") is None  # 63 bytes
    assert refusal(message_group_problem("é" * 32)) is Refusal.GROUP  # 64 bytes


# -- characters -----------------------------------------------------------------


@pytest.mark.parametrize("char", CONTROLS)
def test_control_characters_are_refused_everywhere(char: str) -> None:
    tag = message_problem({}, f"a{char}b", [])
    assert refusal(tag) is Refusal.TAG
    assert tag is not None and "tag cannot contain control character" in tag.text
    key = message_problem({}, None, [f"a{char}b"])
    assert refusal(key) is Refusal.KEY
    assert key is not None and "key cannot contain control character" in key.text
    name = message_problem({f"a{char}b": "v"}, None, [])
    assert refusal(name) is Refusal.PROPERTY
    assert name is not None and "the key of property cannot contain control" in name.text
    value = message_problem({"n": f"a{char}b"}, None, [])
    assert refusal(value) is Refusal.PROPERTY
    assert value is not None and "the value of property cannot contain control" in value.text
    group = message_group_problem(f"a{char}b")
    assert refusal(group) is Refusal.GROUP
    assert group is not None and "message group cannot contain control" in group.text


@pytest.mark.parametrize("char", NOT_CONTROLS)
def test_characters_next_to_the_control_ranges_are_accepted(char: str) -> None:
    assert message_problem({f"a{char}b": f"a{char}b"}, f"a{char}b", ["key"]) is None
    assert message_group_problem(f"a{char}b") is None


def test_blank_tags_keys_and_groups_are_refused() -> None:
    tag = message_problem({}, "  ", [])
    assert tag is not None and tag.refusal is Refusal.TAG and "whitespace" in tag.text
    key = message_problem({}, None, [" "])
    assert key is not None and key.refusal is Refusal.KEY and "whitespace" in key.text
    group = message_group_problem("\u3000")
    assert group is not None and group.refusal is Refusal.GROUP and "whitespace" in group.text


def test_a_tag_with_a_bar_is_refused() -> None:
    problem = message_problem({}, "a|b", [])
    assert problem is not None and problem.refusal is Refusal.TAG and "'|'" in problem.text


@pytest.mark.parametrize("name", ["KEYS", "TAGS", "UNIQ_KEY", "__SHARDINGKEY", "__RMQ.TRANSIENT.X"])
def test_system_property_names_are_refused(name: str) -> None:
    problem = message_problem({name: "v"}, None, [])
    assert problem is not None and problem.refusal is Refusal.PROPERTY
    assert "property is used by system" in problem.text and repr(name) in problem.text


# -- where Skiff is stricter ----------------------------------------------------


def test_skiff_refuses_keys_its_records_cannot_keep_apart() -> None:
    assert refusal(message_problem({}, None, [""])) is Refusal.KEY
    assert refusal(message_problem({}, None, ["a b"])) is Refusal.KEY
    assert refusal(message_problem({}, None, ["a\u3000b"])) is Refusal.KEY
    assert refusal(message_problem({}, "", [])) is Refusal.TAG
    assert refusal(message_problem({"": "v"}, None, [])) is Refusal.PROPERTY


# -- the record door's form -----------------------------------------------------

_text = st.text(st.one_of(st.sampled_from("\x00\x01\x02 |é\x9f\xa0"), st.characters()), max_size=8)


@given(
    user=st.dictionaries(
        _text.filter(lambda n: n not in (UNIQ_KEY, TAGS, KEYS)), _text, max_size=3
    ),
    tag=st.none() | _text,
    keys=st.lists(_text.filter(lambda k: k and " " not in k), max_size=3),
)
def test_a_stored_record_is_judged_as_the_message_it_holds(
    user: dict[str, str], tag: str | None, keys: list[str]
) -> None:
    stored = {**user, UNIQ_KEY: "0A00000100002A9F0000000000000001"}
    if tag is not None:
        stored[TAGS] = tag
    if keys:
        stored[KEYS] = " ".join(keys)
    expected = message_problem(user, tag, keys)
    assert producer_property_problem(stored) == (None if expected is None else expected.text)
