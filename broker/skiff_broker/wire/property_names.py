"""Message property names the broker itself uses (RocketMQ's MessageConst names).

Users may not set them as user properties: they carry the broker's own state.
Every name RocketMQ keeps for itself is refused too, used here or not, so a
message that moves between Skiff and RocketMQ means the same on both.
"""

KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
MESSAGE_GROUP = "__SHARDINGKEY"
DELIVER_AT_MS = "TIMER_DELIVER_MS"
TRANSACTION_PREPARED = "TRAN_MSG"
PRODUCER_GROUP = "PGROUP"
TRANSACTION_ID = "__transactionId__"
# A half message is not checked with its producer before this many seconds (if longer than
# the broker's transaction timeout); from the producer's orphaned-transaction recovery time.
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
REAL_TOPIC = "REAL_TOPIC"
REAL_QUEUE_ID = "REAL_QID"
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
TRACE_CONTEXT = "TRACE_CONTEXT"
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
BORN_HOST_TEXT = "__BORN_HOST"

# Set by the broker on a delivered message whose body is flagged compressed but
# does not inflate: the body is its stored bytes, and the value says why.
UNINFLATABLE_BODY = "__SKIFF_UNINFLATABLE_BODY"

# RocketMQ's own property names (its MessageConst, the names it refuses as user
# properties, and the ones its brokers and proxies read): a producer setting one
# could steer delivery (a delay, a transaction, a queue) or forge broker state.
_ROCKETMQ_INTERNAL = frozenset(
    {
        "TRACE_ON",
        "MSG_REGION",
        "WAIT",
        "DELAY",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "EXTEND_UNIQ_INFO",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "INNER_NUM",
        "INNER_BASE",
        "DUP_INFO",
        "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "PROPERTY_FORWARD_QUEUE_ID",
        "REDIRECT",
        "INNER_MULTI_DISPATCH",
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DEL_MS",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        "__CRC32#",
        # Scheduled delivery as Alibaba Cloud's RocketMQ clients ask for it.
        "__STARTDELIVERTIME",
    }
)
# RocketMQ keeps properties with this prefix out of the commit log.
_ROCKETMQ_TRANSIENT_PREFIX = "__RMQ.TRANSIENT."

RESERVED = _ROCKETMQ_INTERNAL | frozenset(
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
        UNINFLATABLE_BODY,
    }
)


def is_reserved(name: str) -> bool:
    """True if ``name`` is the broker's, not a user's: RocketMQ's or Skiff's own."""
    return name in RESERVED or name.startswith(_ROCKETMQ_TRANSIENT_PREFIX)


def message_id_problem(message_id: str) -> str | None:
    """Why a producer's message may not have this ID (its UNIQ_KEY); None if it may.

    A message whose only property is its ID passes
    ``message_rules.producer_property_problem`` exactly when its ID passes this: the Append door
    checks a run of such records by their IDs.
    """
    return None if message_id.strip() else "it needs a UNIQ_KEY property: the message ID"


# System topics.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
DLQ_PREFIX = "%DLQ%"
# Topics the broker keeps for itself: clients can neither route to nor change them.
INTERNAL_TOPICS = frozenset({SCHEDULE_TOPIC, HALF_TOPIC, OP_HALF_TOPIC})


def dlq_topic(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"
