"""The remoting port's request table: each request code to its handler.

Invariants:
- Every request gets exactly one answer unless it is oneway: an unknown code is
  answered at once with REQUEST_CODE_NOT_SUPPORTED and a remark naming it (logged once
  per code), a handler that fails is answered with SYSTEM_ERROR and logged.
- With ``refuse_all`` (authentication on, signatures not checked yet) no request reaches
  a handler: a caller that proves nothing gets nothing.
- Responses a client sends (answers to broker-initiated requests) are dropped: the
  broker asks clients nothing yet.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping

from .codes import ResponseCode
from .connection import RemotingConnection
from .frames import RemotingCommand

log = logging.getLogger(__name__)

Handler = Callable[
    [RemotingCommand, RemotingConnection], RemotingCommand | Awaitable[RemotingCommand]
]


class HeaderError(ValueError):
    """A request header field that is missing or malformed; answered, never raised further."""


def text_field(request: RemotingCommand, name: str) -> str:
    value = request.ext_fields.get(name)
    if value is None or value == "":
        raise HeaderError(f"the request header needs {name}")
    return value


def int_field(request: RemotingCommand, name: str, default: int | None = None) -> int:
    value = request.ext_fields.get(name)
    if value is None or value == "":
        if default is not None:
            return default
        raise HeaderError(f"the request header needs {name}")
    try:
        return int(value)
    except ValueError:
        raise HeaderError(
            f"{name} in the request header must be an integer, not {value!r}"
        ) from None


# Until the remoting signature (AccessKey/Signature extFields) is checked, a broker with
# authentication on serves no remoting request: an unsigned door would bypass every ACL.
AUTH_NOT_SERVED = (
    "authentication is on, and Skiff does not check RocketMQ 4.x request signatures yet: "
    "the remoting port refuses every request; use a RocketMQ 5 gRPC client on the client "
    "port, or turn authentication off"
)


class RemotingService:
    """``refuse_all``: every request is answered NO_PERMISSION with that remark."""

    def __init__(self, *, refuse_all: str = "") -> None:
        self._handlers: dict[int, Handler] = {}
        self._unsupported_logged: set[int] = set()
        self._refuse_all = refuse_all

    def add(self, handlers: Mapping[int, Handler]) -> None:
        self._handlers.update(handlers)

    @property
    def codes(self) -> frozenset[int]:
        return frozenset(self._handlers)

    async def dispatch(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand | None:
        if request.is_response:
            return None
        if self._refuse_all:
            return request.response(ResponseCode.NO_PERMISSION, self._refuse_all)
        handler = self._handlers.get(request.code)
        if handler is None:
            if request.code not in self._unsupported_logged:
                self._unsupported_logged.add(request.code)
                log.info(
                    "remoting request code %d is not supported; answered "
                    "REQUEST_CODE_NOT_SUPPORTED (logged once per code)",
                    request.code,
                )
            return request.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"request type {request.code} not supported by Skiff",
            )
        try:
            answer = handler(request, connection)
            if inspect.isawaitable(answer):
                answer = await answer
            return answer
        except HeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        except Exception:
            log.exception("remoting request code %d failed", request.code)
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"the broker failed on request code {request.code}; see its log",
            )
