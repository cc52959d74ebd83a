"""What a topic or consumer group may be called, at every door that takes one.

The rules and wording are Apache RocketMQ 5.3's (client ``Validators``, common
``TopicValidator``, the proxy's ``GrpcValidator``), with what to do added:

- a topic name is 1 to ``MAX_TOPIC_NAME_LENGTH`` characters of ``^[%|a-zA-Z0-9_-]+$``;
- a consumer group name is 1 to ``MAX_GROUP_NAME_LENGTH`` characters of the same set;
- the broker's system topics (``SYSTEM_TOPICS`` and any ``rmq_sys_`` name) are not for
  clients, and neither are system consumer groups (``CID_RMQ_SYS_``).

RocketMQ lets a retry or dead-letter topic be up to 255 characters; Skiff keeps every
topic within 127 (its record keeps a topic's length in one byte), which the group limit
of 120 leaves room for: ``%DLQ%<group>`` is at most 125. RocketMQ 5.3.3 itself still
takes groups up to 255 characters; its later releases limit them to 120, as Skiff does.

Invariant: a name these rules accept is non-empty ASCII, so its length in characters is
its length in bytes.
"""

from __future__ import annotations

import re

from ..error_text import quoted
from .property_names import HALF_TOPIC, OP_HALF_TOPIC, SCHEDULE_TOPIC

MAX_TOPIC_NAME_LENGTH = 127
MAX_GROUP_NAME_LENGTH = 120
NAME_CHARSET = "^[%|a-zA-Z0-9_-]+$"
NAME_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")

# TopicValidator's SYSTEM_TOPIC_SET, and its prefix.
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        SCHEDULE_TOPIC,
        "BenchmarkTest",
        HALF_TOPIC,
        "RMQ_SYS_TRACE_TOPIC",
        OP_HALF_TOPIC,
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    }
)
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"


def _blank(name: str) -> bool:
    return not name or name.isspace()


def topic_name_problem(name: str) -> str | None:
    """Why no topic can have this name (RocketMQ's words); None if one can."""
    if _blank(name):
        return (
            f"The specified topic is blank; name the topic with 1 to {MAX_TOPIC_NAME_LENGTH} "
            f"characters of {NAME_CHARSET}"
        )
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (
            f"The specified topic is longer than topic max length {MAX_TOPIC_NAME_LENGTH} "
            f"({len(name)} characters); use a shorter name"
        )
    if NAME_PATTERN.fullmatch(name) is None:
        return (
            f"The specified topic[{quoted(name)}] contains illegal characters, allowing only "
            f"{NAME_CHARSET}"
        )
    return None


def is_system_topic(name: str) -> bool:
    return name in SYSTEM_TOPICS or name.startswith(SYSTEM_TOPIC_PREFIX)


def system_topic_problem(name: str) -> str | None:
    """Why a client may not use this topic; None if it is not one of the broker's own."""
    if is_system_topic(name):
        return (
            f"cannot access system topic {quoted(name)}; it belongs to the broker, use a "
            f"topic of your own (names starting with {SYSTEM_TOPIC_PREFIX!r} are reserved)"
        )
    return None


def group_name_problem(name: str) -> str | None:
    """Why no consumer group can have this name (RocketMQ's words); None if one can."""
    if _blank(name):
        return (
            f"the specified group is blank; name the consumer group with 1 to "
            f"{MAX_GROUP_NAME_LENGTH} characters of {NAME_CHARSET}"
        )
    if len(name) > MAX_GROUP_NAME_LENGTH:
        return (
            f"the specified group is longer than group max length: {MAX_GROUP_NAME_LENGTH} "
            f"({len(name)} characters); use a shorter name"
        )
    if NAME_PATTERN.fullmatch(name) is None:
        return (
            f"the specified group[{quoted(name)}] contains illegal characters, allowing only "
            f"{NAME_CHARSET}"
        )
    if name.startswith(SYSTEM_GROUP_PREFIX):
        return (
            f"cannot use system consumer group {quoted(name)}; names starting with "
            f"{SYSTEM_GROUP_PREFIX!r} are reserved"
        )
    return None
