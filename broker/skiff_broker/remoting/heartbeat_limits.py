"""How much one remoting connection's heartbeats may register: groups and subscriptions.

A heartbeat names producer groups and consumer groups with their subscriptions, and
the broker keeps each until the connection closes. Without a bound, one connection
could make the broker hold any number of them (a new client ID per heartbeat adds
entries rather than replacing them).

Invariants:
- A heartbeat that would take its connection past a limit is refused whole, with the
  limit named and what to do, and nothing of it is recorded; what the connection
  registered before stays as it was.
- A heartbeat that repeats what the connection registered (the same client ID's
  groups) replaces it, so a client's periodic heartbeats never add up.
- The limits are far above what RocketMQ clients register: one client instance per
  connection, its consumers' and producers' groups, their topics.
"""

from __future__ import annotations

# Consumer groups (per client ID) and producer groups one connection may register.
MAX_GROUPS_PER_CONNECTION = 1024
# Subscriptions (topics) over all of a connection's consumer registrations.
MAX_SUBSCRIPTIONS_PER_CONNECTION = 8192
# A subscription's expression (a tag list or an SQL92 filter), in characters.
MAX_EXPRESSION_CHARS = 64 * 1024

Registration = tuple[str, str]  # consumer group, client ID


_ADVICE = (
    "; a RocketMQ client registers one client instance per connection: use fewer groups "
    "or topics per client instance, or split them over several instances"
)


def consumer_problem(
    registered: dict[Registration, int], client_id: str, wanted: dict[str, list[str]]
) -> str | None:
    """Why registering ``wanted`` (group -> its subscriptions' expressions) for
    ``client_id`` would take a connection that ``registered`` (registration -> its
    subscription count) past a limit; None if it would not."""
    for group, expressions in wanted.items():
        for expression in expressions:
            if len(expression) > MAX_EXPRESSION_CHARS:
                return (
                    f"a subscription of group {group} has a {len(expression)}-character "
                    f"expression; the limit is {MAX_EXPRESSION_CHARS}"
                )
    replaced = {(group, client_id) for group in wanted}
    kept = {k: n for k, n in registered.items() if k not in replaced}
    groups = len(kept) + len(wanted)
    if groups > MAX_GROUPS_PER_CONNECTION:
        return (
            f"this heartbeat would register {groups} consumer groups on one connection; "
            f"the limit is {MAX_GROUPS_PER_CONNECTION}{_ADVICE}"
        )
    subscriptions = sum(kept.values()) + sum(len(e) for e in wanted.values())
    if subscriptions > MAX_SUBSCRIPTIONS_PER_CONNECTION:
        return (
            f"this heartbeat would register {subscriptions} subscriptions on one "
            f"connection; the limit is {MAX_SUBSCRIPTIONS_PER_CONNECTION}{_ADVICE}"
        )
    return None


def producer_problem(registered: set[str], wanted: list[str]) -> str | None:
    """Why adding producer groups ``wanted`` to a connection's would pass the limit."""
    groups = len(registered | set(wanted))
    if groups > MAX_GROUPS_PER_CONNECTION:
        return (
            f"this heartbeat would register {groups} producer groups on one connection; "
            f"the limit is {MAX_GROUPS_PER_CONNECTION}{_ADVICE}"
        )
    return None
