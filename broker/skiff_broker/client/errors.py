"""What a client call can fail with; every message is a sentence for the user."""

from __future__ import annotations

import grpc

from .environment import ENDPOINT_ENV, TLS_CA_ENV


class SkiffError(Exception):
    """``code`` names the kind of failure for scripts (a gRPC or RocketMQ status name)."""

    code = "UNKNOWN"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class BrokerUnavailable(SkiffError):
    """The broker could not be reached, or did not answer in time."""

    code = "UNAVAILABLE"


class BrokerError(SkiffError):
    """The broker answered with an error."""


class InvalidArgument(BrokerError):
    """The request is wrong whatever the broker's state (fix the request)."""

    code = "INVALID_ARGUMENT"


class NotFound(BrokerError):
    """A topic, group or message the request names does not exist."""

    code = "NOT_FOUND"


class AlreadyExists(BrokerError):
    """The topic to create exists already."""

    code = "ALREADY_EXISTS"


class FailedPrecondition(BrokerError):
    """The change is unsafe in the broker's current state; the message says why."""

    code = "FAILED_PRECONDITION"


class Unauthenticated(BrokerError):
    """The broker requires signed requests and these were not (or not right)."""

    code = "UNAUTHENTICATED"


class PermissionDenied(BrokerError):
    """The user's ACL does not allow the request; the message names what is missing."""

    code = "PERMISSION_DENIED"


class MessagingError(BrokerError):
    """A RocketMQ v2 call answered with a non-OK ``Status``.

    ``code`` is the status name (e.g. TOPIC_NOT_FOUND), ``number`` its numeric value.
    """

    def __init__(self, number: int, name: str, message: str) -> None:
        super().__init__(message, name)
        self.number = number


_BY_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
}


def from_rpc_error(exc: grpc.RpcError, endpoint: str) -> SkiffError:
    """The exception a failed gRPC call stands for."""
    # Sync calls raise a grpc.Call, grpc.aio calls an AioRpcError: both have these.
    has_status = isinstance(exc, grpc.Call | grpc.aio.AioRpcError)
    code = exc.code() if has_status else grpc.StatusCode.UNKNOWN
    details = (exc.details() if has_status else "") or str(code)
    unverified = "CERTIFICATE_VERIFY_FAILED" in details or "Hostname Verification" in details
    if code is grpc.StatusCode.UNAVAILABLE and unverified:
        return BrokerUnavailable(
            f"the TLS certificate of the broker at {endpoint} could not be verified "
            f"({details}); give its CA with --tls-ca (or {TLS_CA_ENV}; a broker's self-signed "
            "one is <data-dir>/tls/self-signed.crt), or --tls-insecure to skip the check"
        )
    if code is grpc.StatusCode.UNAVAILABLE:
        return BrokerUnavailable(
            f"cannot reach a broker at {endpoint} ({details}); check --endpoint "
            f"(or {ENDPOINT_ENV}) and that the broker is running"
        )
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return BrokerUnavailable(f"the broker at {endpoint} did not answer in time")
    if code is grpc.StatusCode.UNIMPLEMENTED:
        return BrokerError(
            f"the server at {endpoint} does not offer this call; is it a Skiff broker?",
            code.name,
        )
    kind = _BY_STATUS.get(code)
    return kind(details) if kind is not None else BrokerError(details, code.name)
