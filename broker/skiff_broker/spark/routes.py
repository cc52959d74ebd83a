"""Where the source reads a topic: every group of the cluster, as the route names it now.

Invariants:

- The route is asked of the bootstrap endpoints (the ``endpoints`` option, tried in
  order; the first that answers is used). Any broker of a cluster names every
  group that holds the topic; a lone broker names only itself.
- Which endpoint serves a group is asked whenever it is needed: by the driver at
  every planning, by every task right before it pulls. Only group names and queue
  IDs travel from planning to reading, so a failover in between sends the reads to
  the group's new master (or to a replica serving reads while it has none).
- One :class:`PullConsumer` per endpoint, closed with the :class:`Routes`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..client.credentials import Credentials
from ..client.errors import BrokerUnavailable
from ..client.pull_consumer import GroupQueues, PullConsumer


class GroupUnreachable(BrokerUnavailable):
    """The route no longer names a group whose queues the query reads."""


class Routes:
    def __init__(self, bootstrap: Sequence[str], credentials: Credentials | None = None) -> None:
        self._bootstrap = tuple(bootstrap)
        self._credentials = credentials
        self._consumers: dict[str, PullConsumer] = {}

    def consumer(self, endpoint: str) -> PullConsumer:
        consumer = self._consumers.get(endpoint)
        if consumer is None:
            consumer = self._consumers[endpoint] = PullConsumer(
                endpoint, credentials=self._credentials
            )
        return consumer

    def groups(self, topic: str) -> list[GroupQueues]:
        """``topic``'s readable queues on every group, the answering broker's group first."""
        failures = []
        for endpoint in self._bootstrap:
            try:
                return self.consumer(endpoint).group_queues(topic)
            except BrokerUnavailable as exc:
                failures.append(exc.message)
        raise BrokerUnavailable("; ".join(failures) or "no endpoint given")

    def endpoint_of(self, topic: str, group: str) -> str:
        """Where ``group`` serves reads of ``topic`` now."""
        for found in self.groups(topic):
            if found.group == group:
                return found.endpoint
        raise GroupUnreachable(
            f"the route of {topic!r} from {', '.join(self._bootstrap)} does not name group "
            f"{group!r} now: none of its brokers answers, or it lost the topic. Start one of "
            "its brokers (or recreate the topic there) and run the query again"
        )

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()

    def __enter__(self) -> Routes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
