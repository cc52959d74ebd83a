"""The largest message body a broker accepts: RocketMQ's default, and the setting that changes it.

The store's config declares its ``max_message_size`` field with ``MAX_MESSAGE_SIZE_OPTION``,
so ``skiff broker``'s option and variable come from here; the client commands name the same
declaration when a broker refuses a body as too large, without importing the store. The
declaration sits in wire/ because both of them may read it.
"""

from __future__ import annotations

from .setting import Option

# RocketMQ's maxMessageSize, bytes.
ROCKETMQ_MAX_MESSAGE_SIZE = 4 * 1024 * 1024

MAX_MESSAGE_SIZE_OPTION = Option(
    "--max-message-size",
    "SKIFF_MAX_MESSAGE_SIZE",
    "Largest message body accepted; a larger one is refused (MESSAGE_BODY_TOO_LARGE).",
    kind="size",
)
