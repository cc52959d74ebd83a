"""LOCK_BATCH_MQ and UNLOCK_BATCH_MQ: the queue locks 4.x orderly consumers rebalance with.

RocketMQ's rebalance locks (its broker's RebalanceLockManager): a queue of a group is
locked by one client id at a time. An orderly consumer pulls and consumes only queues it
holds, so one queue's messages are consumed in order by one member of the group.

Invariants:
- A lock asked for by the client that holds it is renewed; one held by another client
  is refused until it expires: ``LOCK_TTL_MS`` (RocketMQ's 60 s lockMaxLiveTime) after
  its holder last locked it. Orderly clients renew theirs every 20 s.
- An unlock frees only queues the asking client holds. A closed connection frees
  nothing at once: as in RocketMQ its locks expire, so a queue is not consumed by two
  clients while the old holder may still be finishing a batch.
- Only queues of this broker's topics that exist, within their queue counts, are
  locked; expired locks are dropped as the table is used, so it holds at most one entry
  per live lock.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from ..runtime import Broker
from ..wire.resource_names import group_name_problem
from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .frames import RemotingCommand
from .name_server import json_body

LOCK_TTL_MS = 60_000
# Above this many groups with locks, a lock request sweeps every group's expired locks.
_SWEEP_ALL_ABOVE = 1024

QueueKey = tuple[str, int]  # topic, queue id


@dataclasses.dataclass(slots=True)
class _Lock:
    client_id: str
    renewed_ms: int


class QueueLocks:
    """The lock table: group -> queue -> holder. Thread-safe; ``clock`` is in ms."""

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._lock = threading.Lock()
        self._groups: dict[str, dict[QueueKey, _Lock]] = {}

    def try_lock(self, group: str, client_id: str, queues: list[QueueKey]) -> list[QueueKey]:
        """The queues now held by ``client_id`` (renewed or newly locked), in asked order."""
        now = self._clock()
        with self._lock:
            if len(self._groups) > _SWEEP_ALL_ABOVE:
                for name in list(self._groups):
                    self._sweep(name, now)
            held = self._groups.setdefault(group, {})
            granted = []
            for queue in queues:
                entry = held.get(queue)
                if entry is None or entry.client_id == client_id or _expired(entry, now):
                    held[queue] = _Lock(client_id, now)
                    granted.append(queue)
            self._sweep(group, now)
            return granted

    def unlock(self, group: str, client_id: str, queues: list[QueueKey]) -> None:
        with self._lock:
            held = self._groups.get(group)
            if held is None:
                return
            for queue in queues:
                entry = held.get(queue)
                if entry is not None and entry.client_id == client_id:
                    del held[queue]
            if not held:
                del self._groups[group]

    def holder(self, group: str, queue: QueueKey) -> str | None:
        """The client holding ``queue`` for ``group`` now, or None."""
        with self._lock:
            entry = self._groups.get(group, {}).get(queue)
            return None if entry is None or _expired(entry, self._clock()) else entry.client_id

    def group_locked(self, group: str) -> bool:
        """True while any queue of ``group`` is locked: the group consumes orderly."""
        with self._lock:
            held = self._groups.get(group, {})
            now = self._clock()
            return any(not _expired(entry, now) for entry in held.values())

    def _sweep(self, group: str, now: int) -> None:
        held = self._groups[group]
        for queue in [q for q, entry in held.items() if _expired(entry, now)]:
            del held[queue]
        if not held:
            del self._groups[group]


def _expired(entry: _Lock, now: int) -> bool:
    return now - entry.renewed_ms > LOCK_TTL_MS


class QueueLocking:
    """The two requests over one ``QueueLocks`` table."""

    def __init__(self, broker: Broker, locks: QueueLocks | None = None) -> None:
        self._broker = broker
        self.locks = locks or QueueLocks()

    def handlers(self) -> dict:
        return {
            RequestCode.LOCK_BATCH_MQ: self.lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch,
        }

    def lock_batch(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        parsed = self._parse(request)
        if isinstance(parsed, RemotingCommand):
            return parsed
        group, client_id, queues = parsed
        granted = set(self.locks.try_lock(group, client_id, list(queues)))
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body({"lockOKMQSet": [queues[q] for q in queues if q in granted]})
        return response

    def unlock_batch(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        parsed = self._parse(request)
        if isinstance(parsed, RemotingCommand):
            return parsed
        group, client_id, queues = parsed
        self.locks.unlock(group, client_id, list(queues))
        return request.response(ResponseCode.SUCCESS)

    def _parse(
        self, request: RemotingCommand
    ) -> tuple[str, str, dict[QueueKey, dict[str, Any]]] | RemotingCommand:
        """(group, client id, this broker's existing queues asked for -> as the client named
        them), or the answer refusing a body that is not RocketMQ's Lock/UnlockBatchRequestBody."""
        try:
            data = json.loads(request.body or b"{}")
            group = str(data.get("consumerGroup") or "")
            client_id = str(data.get("clientId") or "")
            asked = data.get("mqSet") or []
            if not isinstance(asked, list):
                raise TypeError("mqSet must be a list")
            queues: dict[QueueKey, dict[str, Any]] = {}
            for mq in asked:
                topic_name = str(mq["topic"])
                queue_id = int(mq["queueId"])
                broker_name = str(mq.get("brokerName") or "")
                topic = self._broker.topics.get(topic_name)
                if (
                    topic is None
                    or broker_name != self._broker.config.broker_name
                    or not 0 <= queue_id < max(topic.read_queue_nums, topic.write_queue_nums)
                ):
                    continue  # not a queue of this broker: never locked here
                queues[(topic_name, queue_id)] = {
                    "topic": topic_name,
                    "brokerName": broker_name,
                    "queueId": queue_id,
                }
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"the body is not RocketMQ's LockBatchRequestBody: {exc}",
            )
        problem = group_name_problem(group)
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, problem)
        if not client_id:
            return request.response(ResponseCode.SYSTEM_ERROR, "the request body needs clientId")
        return group, client_id, queues
