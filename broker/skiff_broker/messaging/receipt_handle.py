"""Receipt handles: what a consumer sends back to ack one delivery of a message.

Opaque to clients. The fields follow RocketMQ's layout, space-separated:
``startOffset retrieveTime invisibleTime reviveQueueId topicType brokerName
queueId offset commitLogOffset``. A delivery is identified by its queue, offset
and retrieve time; a redelivery or a changed invisible time gets a new handle,
and the old one stops working.
"""

from __future__ import annotations

import dataclasses

from .status import Code, RequestError

_FIELDS = 9


@dataclasses.dataclass(frozen=True, slots=True)
class ReceiptHandle:
    queue_id: int
    offset: int
    retrieve_time: int
    invisible_time: int
    broker_name: str
    commit_log_offset: int = -1

    def encode(self) -> str:
        return " ".join(
            str(part)
            for part in (
                self.offset,
                self.retrieve_time,
                self.invisible_time,
                0,
                0,
                self.broker_name,
                self.queue_id,
                self.offset,
                self.commit_log_offset,
            )
        )

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        parts = text.split(" ")
        try:
            if len(parts) != _FIELDS:
                raise ValueError
            return cls(
                queue_id=int(parts[6]),
                offset=int(parts[7]),
                retrieve_time=int(parts[1]),
                invisible_time=int(parts[2]),
                broker_name=parts[5],
                commit_log_offset=int(parts[8]),
            )
        except ValueError:
            raise RequestError(
                Code.INVALID_RECEIPT_HANDLE,
                "receipt handle is malformed; use the handle the broker sent with the message",
            ) from None
