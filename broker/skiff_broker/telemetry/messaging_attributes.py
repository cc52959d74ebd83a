"""OpenTelemetry's messaging semantic conventions for the broker's SERVER spans.

Every apache.rocketmq.v2 span carries ``messaging.system=rocketmq``; the methods that
move or settle messages add the operation (``messaging.operation.type``, and the older
``messaging.operation`` with the same value), the topic, the consumer group, the number
of messages of a batch and, where the request is about one message, its ID. Read from
the request only when the span is sampled: building attributes costs more than a
small request.

A request that cannot be read (undecodable bytes) gets the per-method attributes only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import conventions as cv

MESSAGING_SERVICE = "apache.rocketmq.v2.MessagingService"

# The convention's operation types: send, receive, settle (acknowledge and its kin).
_OPERATIONS = {
    "SendMessage": "send",
    "ReceiveMessage": "receive",
    "PullMessage": "receive",
    "AckMessage": "settle",
    "ChangeInvisibleDuration": "settle",
    "ForwardMessageToDeadLetterQueue": "settle",
    "EndTransaction": "settle",
}


def method_attributes(service: str, method: str) -> dict[str, Any]:
    """What every span of ``service``/``method`` carries (none outside RocketMQ's service)."""
    if service != MESSAGING_SERVICE:
        return {}
    attributes: dict[str, Any] = {cv.MESSAGING_SYSTEM: "rocketmq"}
    operation = _OPERATIONS.get(method)
    if operation is not None:
        attributes[cv.MESSAGING_OPERATION_TYPE] = operation
        attributes[cv.MESSAGING_OPERATION] = operation
    return attributes


def _send(request: Any) -> dict[str, Any]:
    messages = request.messages
    found: dict[str, Any] = {cv.MESSAGE_COUNT: len(messages)}
    if messages:
        found[cv.TOPIC] = messages[0].topic.name
    if len(messages) == 1:
        found[cv.MESSAGE_ID] = messages[0].system_properties.message_id
    return found


def _receive(request: Any) -> dict[str, Any]:
    return {cv.TOPIC: request.message_queue.topic.name, cv.CONSUMER_GROUP: request.group.name}


def _ack(request: Any) -> dict[str, Any]:
    entries = request.entries
    found: dict[str, Any] = {
        cv.TOPIC: request.topic.name,
        cv.CONSUMER_GROUP: request.group.name,
        cv.MESSAGE_COUNT: len(entries),
    }
    if len(entries) == 1:
        found[cv.MESSAGE_ID] = entries[0].message_id
    return found


def _one_message(request: Any) -> dict[str, Any]:
    found = {cv.TOPIC: request.topic.name, cv.MESSAGE_ID: request.message_id}
    group = getattr(request, "group", None)
    if group is not None:
        found[cv.CONSUMER_GROUP] = group.name
    return found


_FROM_REQUEST: dict[str, Callable[[Any], dict[str, Any]]] = {
    "SendMessage": _send,
    "ReceiveMessage": _receive,
    "PullMessage": _receive,
    "AckMessage": _ack,
    "ChangeInvisibleDuration": _one_message,
    "ForwardMessageToDeadLetterQueue": _one_message,
    "EndTransaction": _one_message,
}


def request_reader(service: str, method: str) -> Callable[[Any], dict[str, Any]] | None:
    """What reads a request of ``service``/``method`` into span attributes; None: nothing."""
    if service != MESSAGING_SERVICE:
        return None
    read = _FROM_REQUEST.get(method)
    if read is None:
        return None

    def attributes(request: Any) -> dict[str, Any]:
        try:
            found = read(request)
        except AttributeError:  # undecodable: not the message type it should be
            return {}
        # Empty strings say nothing (e.g. a pull without a group).
        return {k: v for k, v in found.items() if v != ""}

    return attributes
