"""The remoting port's request table: each request code to its handler.

Invariants:
- Every request gets exactly one answer unless it is oneway: an unknown code is
  answered at once with REQUEST_CODE_NOT_SUPPORTED and a remark naming it (logged once
  per code), a handler that refuses (``Refused``) is answered with its code and remark,
  a handler that fails is answered with SYSTEM_ERROR and logged.
- With a ``gate`` (authentication on, access.py) no request reaches a handler, nor is
  told whether its code is served, before the gate lets it through.
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


class Refused(Exception):
    """A request answered with ``code`` and ``remark`` instead of being carried out."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


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


# The answer refusing a request, or None to serve it.
Gate = Callable[[RemotingCommand, RemotingConnection], RemotingCommand | None]


# Told of every answer a client sends to a request of the broker's.
Answered = Callable[[RemotingCommand, RemotingConnection], None]


class RemotingService:
    """``gate``: asked first about every request (authentication on); ``answered``: told
    of clients' answers to the broker's own requests."""

    def __init__(self, *, gate: Gate | None = None, answered: Answered | None = None) -> None:
        self._handlers: dict[int, Handler] = {}
        self._unsupported_logged: set[int] = set()
        self._gate = gate
        self._answered = answered

    def add(self, handlers: Mapping[int, Handler]) -> None:
        self._handlers.update(handlers)

    @property
    def codes(self) -> frozenset[int]:
        return frozenset(self._handlers)

    async def dispatch(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand | None:
        if request.is_response:
            if self._answered is not None:
                self._answered(request, connection)
            return None
        if self._gate is not None:
            refusal = self._gate(request, connection)
            if refusal is not None:
                return refusal
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
        except Refused as exc:
            return request.response(exc.code, exc.remark)
        except HeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        except Exception:
            log.exception("remoting request code %d failed", request.code)
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"the broker failed on request code {request.code}; see its log",
            )
