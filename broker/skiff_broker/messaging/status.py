"""RocketMQ v2 ``Status`` values and the errors that carry them.

Business errors travel inside the response body with gRPC status OK, as the
official clients expect; the message says what to do.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from ..delivery.transactions import (
    AlreadyEnded,
    EndNotStored,
    TransactionRefused,
    UnknownTransaction,
)
from ..error_text import bounded
from ..store.results import PutStatus

Code = pb.Code


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=bounded(message) or pb.Code.Name(code))


# An enum look-up is a Python ``__getattr__``; the send and ack paths read this per entry.
CODE_OK = Code.OK
OK = status(CODE_OK, "OK")


class RequestError(Exception):
    """Ends a request with a v2 status code and a sentence for the user."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def to_status(self) -> pb.Status:
        return status(self.code, self.message)


_PUT_CODES = {
    PutStatus.PUT_OK: pb.Code.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: pb.Code.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.MESSAGE_ILLEGAL: pb.Code.BAD_REQUEST,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: pb.Code.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.DISK_FULL: pb.Code.INTERNAL_SERVER_ERROR,
    PutStatus.SERVICE_NOT_AVAILABLE: pb.Code.INTERNAL_SERVER_ERROR,
    # RocketMQ's FLUSH_SLAVE_TIMEOUT as the v2 protocol spells it.
    PutStatus.FLUSH_SLAVE_TIMEOUT: pb.Code.SLAVE_PERSISTENCE_TIMEOUT,
}


def put_code(put_status: PutStatus) -> int:
    return _PUT_CODES[put_status]


def transaction_refused(exc: TransactionRefused) -> RequestError:
    """The v2 status of an EndTransaction the transaction service did not carry out."""
    if isinstance(exc, EndNotStored):
        return RequestError(put_code(exc.status), exc.message)
    if isinstance(exc, AlreadyEnded):
        return RequestError(pb.Code.PRECONDITION_FAILED, exc.message)
    assert isinstance(exc, UnknownTransaction), exc
    return RequestError(pb.Code.INVALID_TRANSACTION_ID, exc.message)
