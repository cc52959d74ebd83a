"""The in-sync set a Lease publishes: every replica it names holds every acknowledged write.

The holder publishes in two steps (as the Lease elector does): before writing
the Lease, the tracker counts the old set and the new one together; once the
Lease holds the new set, only the new one. Whatever the order of appends, acks,
disconnections and renewals, a replica named in the Lease (which may take over)
has acknowledged everything that was released to writers.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from skiff_broker.ha.in_sync import InSyncTracker

REPLICAS = ["r-0", "r-1", "r-2"]

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 500)),
        st.tuples(st.just("ack"), st.sampled_from(REPLICAS), st.integers(0, 600)),
        st.tuples(st.just("drop"), st.sampled_from(REPLICAS)),
        st.tuples(st.just("join"), st.sampled_from(REPLICAS)),
        st.tuples(st.just("renew"), st.booleans()),
    ),
    max_size=80,
)


@settings(max_examples=500, deadline=None)
@given(operations, st.integers(1, 2), st.integers(0, 300))
# Two named replicas, one acknowledging ahead of the other: the slower one bounds writes.
@example(
    [("join", "r-0"), ("join", "r-1"), ("append", 100), ("renew", True), ("ack", "r-0", 50)],
    1,
    0,
)
def test_every_replica_the_lease_names_holds_every_released_write(
    steps: list[tuple], required: int, term_start: int
) -> None:
    end = [term_start]
    tracker = InSyncTracker(required=required, max_gap=400, master_offset=lambda: end[0])
    # A new master: the Lease names no replica yet, and nothing of this term is released.
    tracker.waiters.reset(0)
    tracker.publish(frozenset())
    on_lease: frozenset[str] = frozenset()
    states = {}
    for step in steps:
        kind = step[0]
        if kind == "append":
            end[0] += step[1]
        elif kind == "join":
            # A replica (re)connects from where its log ends: a new one from the term's
            # start, a returning one from what it acknowledged before.
            before = states.get(step[1])
            start = before.acked_offset if before else min(end[0], term_start)
            if before is not None:
                # A live name is not taken over: the old connection ended first.
                tracker.disconnected(before)
            states[step[1]] = tracker.connected(step[1], "addr", start)
        elif kind == "ack" and step[1] in states and states[step[1]].connected:
            state = states[step[1]]
            tracker.acked(state, max(state.acked_offset, min(step[2] + term_start, end[0])))
        elif kind == "drop" and step[1] in states:
            tracker.disconnected(states[step[1]])
        elif kind == "renew":
            candidates = frozenset(tracker.publishable(term_start))
            tracker.publish((tracker.published or frozenset()) | candidates)
            if step[1]:  # the Lease write succeeded
                on_lease = candidates
                tracker.publish(candidates)
        released = tracker.waiters.flushed
        for name in on_lease:
            assert states[name].acked_offset >= released, (name, released)
