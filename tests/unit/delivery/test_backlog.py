"""Consumer groups' lag, in-flight and ready messages from queue offsets."""

from __future__ import annotations

from skiff_broker.delivery.backlog import GroupBacklog, group_backlogs

ENDS = {("orders", 0): (0, 10), ("orders", 1): (4, 6), ("audit", 0): (0, 3)}


def backlogs(committed, popped):  # type: ignore[no-untyped-def]
    return group_backlogs(
        committed, popped, lambda t, q: ENDS[(t, q)][0], lambda t, q: ENDS[(t, q)][1]
    )


def test_a_pull_groups_whole_lag_is_ready() -> None:
    (found,) = backlogs({("pull", "orders", 0): 7, ("pull", "orders", 1): 5}, {})
    assert found == GroupBacklog("orders", "pull", lag=3 + 1, inflight=0)
    assert found.ready == 4


def test_a_pop_group_counts_what_it_was_handed_and_not_acknowledged() -> None:
    # The pop state is newer than the committed offset of the same queue.
    (found,) = backlogs({("pop", "orders", 0): 1}, {("pop", "orders", 0): (4, 9)})
    assert (found.lag, found.inflight, found.ready) == (6, 5, 1)


def test_positions_outside_the_queue_are_held_to_what_it_keeps() -> None:
    # Retention deleted below offset 4 of queue 1; an offset past the end counts nothing.
    found = backlogs({("g", "orders", 1): 2, ("g", "audit", 0): 8}, {})
    assert found == [
        GroupBacklog("audit", "g", lag=0, inflight=0),
        GroupBacklog("orders", "g", lag=2, inflight=0),
    ]
