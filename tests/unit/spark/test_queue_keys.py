"""Queues named by group and ID in the Spark source's offsets and options (no Spark needed)."""

from __future__ import annotations

import pytest

from skiff_broker.client.pull_consumer import GroupQueues
from skiff_broker.spark.offsets import named_queues, not_behind, with_group_keys
from skiff_broker.spark.options import OptionError, parse_source_options
from skiff_broker.spark.queue_keys import queue_key, split_queue_key

TWO_GROUPS = [
    GroupQueues("orders-a", "10.0.0.1:8081", (0, 1)),
    GroupQueues("orders-b", "10.0.0.2:8081", (0, 1, 2)),
]
ONE_GROUP = TWO_GROUPS[:1]


def test_a_key_is_group_slash_queue_and_splits_at_the_last_slash():
    assert queue_key("orders-a", 3) == "orders-a/3"
    assert split_queue_key("orders-a/3") == ("orders-a", 3)
    assert split_queue_key("team/orders/12") == ("team/orders", 12)
    for bad in ("3", "/3", "orders-a/", "orders-a/x"):
        with pytest.raises(ValueError, match="<group>/<queue ID>"):
            split_queue_key(bad)


def test_options_take_group_keys_and_bare_ids_and_refuse_anything_else():
    options = parse_source_options(
        {
            "endpoints": "127.0.0.1:8081",
            "topic": "orders",
            "startingOffsets": '{"orders": {"orders-a/0": 42, "orders-b/2": -2, "1": 7}}',
        }
    )
    assert options.starting.per_queue == {"orders": {"orders-a/0": 42, "orders-b/2": -2, "1": 7}}
    with pytest.raises(OptionError, match="must be a queue"):
        parse_source_options(
            {
                "endpoints": "127.0.0.1:8081",
                "topic": "orders",
                "endingOffsets": '{"orders": {"a/": 1}}',
            }
        )


def test_named_queues_key_by_group_and_take_bare_ids_only_on_one_group():
    assert named_queues("orders", {"orders-b/2": 5, "orders-a/0": 1}, TWO_GROUPS) == {
        "orders-b/2": 5,
        "orders-a/0": 1,
    }
    assert named_queues("orders", {"1": 9}, ONE_GROUP) == {"orders-a/1": 9}
    with pytest.raises(OptionError, match=r'name queue 1 with its group, e\.g\. "orders-a/1"'):
        named_queues("orders", {"1": 9}, TWO_GROUPS)
    with pytest.raises(OptionError, match=r"has no readable queue \['orders-a/2'\]"):
        named_queues("orders", {"orders-a/2": 0}, TWO_GROUPS)
    with pytest.raises(OptionError, match="has no readable queue"):
        named_queues("orders", {"orders-c/0": 0}, TWO_GROUPS)


def test_checkpointed_bare_ids_become_keys_of_the_group_they_were_read_from():
    old = {"orders": {"0": 40, "1": 12}, "audit": {"orders-b/0": 3}}
    assert with_group_keys(old, {"orders": "orders-a"}) == {
        "orders": {"orders-a/0": 40, "orders-a/1": 12},
        "audit": {"orders-b/0": 3},
    }


def test_an_end_keeps_every_queue_of_the_start_and_never_goes_back():
    start = {"t": {"a/0": 10, "b/0": 7}}
    # Group b left the route; a's queue 0 went back (recreated); a/1 is new.
    end = {"t": {"a/0": 4, "a/1": 3}}
    assert not_behind(start, end) == {"t": {"a/0": 10, "b/0": 7, "a/1": 3}}
    assert not_behind(start, {"t": {"a/0": 15, "b/0": 9}}) == {"t": {"a/0": 15, "b/0": 9}}
