"""QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE: queues the broker assigns a consumer.

A 5.x remoting consumer with ``setClientRebalance(false)`` asks the broker which queues
of a topic are its own and whether to pull or pop them (RocketMQ's
QueryAssignmentProcessor). Skiff answers for its own queues:

Invariants:
- A topic's mode is its group's entry (``mqadmin setConsumeMode``), else PULL; a retry
  topic is always pulled, as in RocketMQ.
- POP: every member gets each queue as one queue id -1 (RocketMQ's popShareQueueNum 0:
  every member pops every queue; the pops' invisibility keeps them apart).
- PULL, clustering: the queues are split among the group's members online now as
  RocketMQ's strategy named by the consumer splits them (AVG, AVG_BY_CIRCLE), members
  and queues sorted as RocketMQ sorts them; broadcasting: every queue to every member.
- A member not known yet (no heartbeat) or an unknown strategy gets no assignment
  (``null``), which the client skips until it asks again.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ..runtime import Broker
from ..wire.resource_names import group_name_problem
from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .consuming import Consuming
from .frames import RemotingCommand
from .name_server import json_body
from .redelivery import RETRY_PREFIX
from .service import HeaderError, Refused


def _body(request: RemotingCommand, what: str) -> dict[str, Any]:
    try:
        data = json.loads(request.body or b"{}")
    except ValueError as exc:
        raise HeaderError(f"the body is not RocketMQ's {what}: {exc}") from None
    if not isinstance(data, dict):
        raise HeaderError(f"the body is not RocketMQ's {what}: not an object")
    return data


def averagely(queues: list[int], members: list[str], member: str) -> list[int]:
    """RocketMQ's AllocateMessageQueueAveragely: a contiguous share per member."""
    index = members.index(member)
    mod = len(queues) % len(members)
    if len(queues) <= len(members):
        size = 1
    elif mod > 0 and index < mod:
        size = len(queues) // len(members) + 1
    else:
        size = len(queues) // len(members)
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [queues[(start + i) % len(queues)] for i in range(min(size, len(queues) - start))]


def by_circle(queues: list[int], members: list[str], member: str) -> list[int]:
    """RocketMQ's AllocateMessageQueueAveragelyByCircle: every n-th queue."""
    index = members.index(member)
    return queues[index :: len(members)]


STRATEGIES = {"AVG": averagely, "AVG_BY_CIRCLE": by_circle}


class Assignments:
    def __init__(self, broker: Broker, consuming: Consuming) -> None:
        self._broker = broker
        self._consuming = consuming

    def handlers(self) -> dict:
        return {
            RequestCode.QUERY_ASSIGNMENT: self.query_assignment,
            RequestCode.SET_MESSAGE_REQUEST_MODE: self.set_mode,
        }

    def query_assignment(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        data = _body(request, "QueryAssignmentRequestBody")
        topic_name = str(data.get("topic") or "")
        group = str(data.get("consumerGroup") or "")
        client_id = str(data.get("clientId") or "")
        problem = group_name_problem(group)
        if problem is not None:
            raise HeaderError(problem)
        topic = self._broker.topics.get(topic_name)
        queues: list[int] | None = None
        mode = "PULL"
        if topic is not None:
            mode = (
                "PULL"
                if topic_name.startswith(RETRY_PREFIX)
                else self._broker.request_modes.mode(topic_name, group)
            )
            everything = list(range(topic.read_queue_nums))
            members = sorted(m.client_id for m in self._consuming.members(group))
            strategy = STRATEGIES.get(str(data.get("strategyName") or "AVG"))
            if str(data.get("messageModel") or "CLUSTERING") == "BROADCASTING":
                queues = everything
            elif mode == "POP":
                queues = [-1]
            elif client_id in members and strategy is not None:
                queues = strategy(everything, members, client_id)
        assignments = (
            None
            if queues is None
            else [
                {
                    "messageQueue": {
                        "brokerName": self._broker.config.broker_name,
                        "queueId": queue_id,
                        "topic": topic_name,
                    },
                    "mode": mode,
                }
                for queue_id in queues
            ]
        )
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body({"messageQueueAssignments": assignments})
        return response

    async def set_mode(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        data = _body(request, "SetMessageRequestModeRequestBody")
        problem = group_name_problem(str(data.get("consumerGroup") or ""))
        if problem is not None:
            raise HeaderError(problem)
        if str(data.get("topic") or "").startswith(RETRY_PREFIX):
            raise Refused(
                ResponseCode.SYSTEM_ERROR,
                "a retry topic is always pulled (as in RocketMQ); set the mode of its topic",
            )
        if self._broker.is_replica:
            raise Refused(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"{self._broker.store.read_only_reason}; set the mode on the master",
            )
        try:
            # Writing the file: not on the event loop.
            await asyncio.to_thread(self._broker.request_modes.put, data)
        except ValueError as exc:
            raise Refused(ResponseCode.SYSTEM_ERROR, f"the mode was not set: {exc}") from None
        return request.response(ResponseCode.SUCCESS)
