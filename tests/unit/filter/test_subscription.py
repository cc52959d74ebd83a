"""A subscription's SQL92 filter is compiled once, large expressions are not kept, and its
check of a raw PROPERTIES field decides as its check of the decoded message does."""

from __future__ import annotations

from skiff_broker.filter import subscription
from skiff_broker.filter.subscription import COMPILED_MAX_LENGTH, VERDICTS_KEPT, sql92_filter
from skiff_broker.wire.properties import decode_properties, encode_properties
from skiff_broker.wire.record_codec import StoredMessage


def _message(**properties: str) -> StoredMessage:
    return StoredMessage(
        topic="t", body=b"", queue_id=0, queue_offset=0, physical_offset=0, store_size=0,
        properties=properties, flag=0, sys_flag=0, born_timestamp=0, born_host="",
        store_timestamp=0, store_host="", reconsume_times=0, prepared_transaction_offset=0,
        body_crc=0,
    )  # fmt: skip


def test_a_subscription_is_compiled_once_and_decides_by_properties():
    first = sql92_filter("a > 5")
    assert sql92_filter("a > 5") is first
    assert first.tag_codes is None
    assert first.accept(_message(a="6")) and not first.accept(_message(a="5"))


def test_expressions_past_the_length_kept_are_served_but_never_cached():
    kept = subscription._compiled.cache_info().currsize
    for n in range(20):
        members = ",".join(f"'v{n}-{i}'" for i in range(COMPILED_MAX_LENGTH // 8))
        expression = f"b IN ({members})"
        assert len(expression) > COMPILED_MAX_LENGTH
        assert sql92_filter(expression).accept(_message(b=f"v{n}-0"))
    assert subscription._compiled.cache_info().currsize == kept


FIELDS = [
    {"a": "6", "b": "x"},
    {"a": "5", "b": "x"},
    {"a": "six", "b": "x"},  # a type mismatch
    {"b": "x"},  # a missing
    {"aa": "9", "ba": "9", "b": "x"},  # names that end or start with a read name
    {"a": "7", "b": "x\u00e9", "TAGS": "TagA"},
    {"a": "", "b": ""},
    {},
]


def test_the_properties_check_decides_as_accept_does():
    for expression in ("a > 5 AND b = 'x'", "a IS NULL", "b <> 'x' OR TAGS = 'TagA'", "TRUE"):
        subscription = sql92_filter(expression)
        for properties in FIELDS:
            field = encode_properties(properties)
            for _ in range(2):  # the second time from the verdicts kept
                assert subscription.field_matches(field) is subscription.accept(
                    _message(**decode_properties(field))
                ), (expression, properties)


def test_a_name_given_twice_is_read_as_its_last_value_as_the_decode_does():
    subscription = sql92_filter("a > 5")
    field = b"a\x016\x02UNIQ_KEY\x01id\x02a\x011\x02"
    assert decode_properties(field)["a"] == "1"
    assert not subscription.field_matches(field)
    assert subscription.field_matches(b"a\x011\x02a\x016\x02")
    # A field cut short of its last separator, and a value with the other separator in it.
    for field in (b"UNIQ_KEY\x01id\x02a\x016", b"a\x016\x01x\x02", b"xa\x016\x02"):
        assert subscription.field_matches(field) is subscription.accept(
            _message(**decode_properties(field))
        ), field


def test_the_verdicts_kept_stay_bounded_and_right():
    subscription = sql92_filter("id > 100")
    for i in range(VERDICTS_KEPT + 500):
        assert subscription.field_matches(encode_properties({"id": str(i)})) is (i > 100)
    assert len(subscription._verdicts) == VERDICTS_KEPT
