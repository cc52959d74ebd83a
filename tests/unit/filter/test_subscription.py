"""A subscription's SQL92 filter is compiled once, and large expressions are not kept."""

from __future__ import annotations

from skiff_broker.filter import subscription
from skiff_broker.filter.subscription import COMPILED_MAX_LENGTH, sql92_filter
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
