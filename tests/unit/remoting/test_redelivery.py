"""RocketMQ's reconsume levels for a message a 4.x consumer sends back."""

from __future__ import annotations

from skiff_broker.remoting.redelivery import Redelivery, redelivery_for


def test_without_a_level_from_the_client_the_retry_waits_three_plus_its_reconsume_times() -> None:
    assert redelivery_for(0, 16, 0) == Redelivery(dead_letter=False, level=3)
    assert redelivery_for(5, 16, 0) == Redelivery(dead_letter=False, level=8)


def test_levels_past_the_last_are_the_last() -> None:
    assert redelivery_for(15, 16, 0) == Redelivery(dead_letter=False, level=18)
    assert redelivery_for(1, 16, 40) == Redelivery(dead_letter=False, level=18)


def test_the_clients_level_wins() -> None:
    assert redelivery_for(4, 16, 1) == Redelivery(dead_letter=False, level=1)


def test_at_max_reconsume_times_or_a_negative_level_the_message_is_dead() -> None:
    assert redelivery_for(16, 16, 0).dead_letter
    assert redelivery_for(2, 2, 1).dead_letter
    assert redelivery_for(0, 16, -1).dead_letter
    assert not redelivery_for(1, 2, 0).dead_letter
