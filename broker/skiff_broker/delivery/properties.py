"""Message property names the broker itself uses (RocketMQ's MessageConst names).

Users may not set them as user properties: they carry the broker's own state.
"""

KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
MESSAGE_GROUP = "__SHARDINGKEY"
DELIVER_AT_MS = "TIMER_DELIVER_MS"
TRANSACTION_PREPARED = "TRAN_MSG"
PRODUCER_GROUP = "PGROUP"
TRANSACTION_ID = "__transactionId__"
REAL_TOPIC = "REAL_TOPIC"
REAL_QUEUE_ID = "REAL_QID"
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
TRACE_CONTEXT = "TRACE_CONTEXT"
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
BORN_HOST_TEXT = "__BORN_HOST"

RESERVED = frozenset(
    {
        KEYS,
        TAGS,
        UNIQ_KEY,
        MESSAGE_GROUP,
        DELIVER_AT_MS,
        TRANSACTION_PREPARED,
        PRODUCER_GROUP,
        TRANSACTION_ID,
        REAL_TOPIC,
        REAL_QUEUE_ID,
        RETRY_TOPIC,
        ORIGIN_MESSAGE_ID,
        DLQ_ORIGIN_TOPIC,
        DLQ_ORIGIN_MESSAGE_ID,
        TRACE_CONTEXT,
        CHECK_TIMES,
        BORN_HOST_TEXT,
        "DELAY",
        "WAIT",
        "MAX_OFFSET",
        "MIN_OFFSET",
        "CLUSTER",
        "RECONSUME_TIME",
        "MAX_RECONSUME_TIMES",
    }
)

# Properties a producer sets among the broker's own, and its limits on the rest
# (RocketMQ's proxy limits).
PRODUCER_PROPERTIES = frozenset({TAGS, KEYS, UNIQ_KEY})
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTIES_BYTES = 16 * 1024


def producer_property_problem(properties: dict[str, str]) -> str | None:
    """Why a producer's message may not carry these properties; None if it may.

    ``properties`` are a stored record's: the user's plus TAGS, KEYS and UNIQ_KEY.
    """
    if not properties.get(UNIQ_KEY, "").strip():
        return "it needs a UNIQ_KEY property: the message ID"
    user = 0
    size = 0
    for name, value in properties.items():
        if name in PRODUCER_PROPERTIES:
            continue
        if name in RESERVED:
            return f"property {name!r} is reserved for the broker; choose another name"
        if not name:
            return "a property name must not be empty"
        user += 1
        size += len(name) + len(value)
    if user > MAX_USER_PROPERTIES or size > MAX_USER_PROPERTIES_BYTES:
        return (
            f"user properties are limited to {MAX_USER_PROPERTIES} entries and "
            f"{MAX_USER_PROPERTIES_BYTES // 1024} KiB"
        )
    tag = properties.get(TAGS)
    if tag is not None and (not tag.strip() or "|" in tag):
        return f"tag {tag!r} must be non-blank without '|'"
    return None


# System topics.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
DLQ_PREFIX = "%DLQ%"
# Topics the broker keeps for itself: clients can neither route to nor change them.
INTERNAL_TOPICS = frozenset({SCHEDULE_TOPIC, HALF_TOPIC, OP_HALF_TOPIC})


def dlq_topic(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"
