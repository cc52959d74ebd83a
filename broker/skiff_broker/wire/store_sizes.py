"""RocketMQ's production file sizes of a store, shared by the store and the operator.

MessageStoreConfig's ``mappedFileSizeCommitLog``, ``mappedFileSizeConsumeQueue`` / 20
(20-byte units), ``maxIndexNum`` and ``maxHashSlotNum``. A store made with them opens in
RocketMQ as it is; the operator renders them for its pods, while ``skiff broker`` on a
laptop starts smaller (store/config.py).
"""

from __future__ import annotations

ROCKETMQ_COMMIT_LOG_FILE_SIZE = 1024**3
ROCKETMQ_CONSUME_QUEUE_FILE_ENTRIES = 300_000
ROCKETMQ_INDEX_FILE_ENTRIES = 20_000_000
ROCKETMQ_INDEX_HASH_SLOTS = 5_000_000
