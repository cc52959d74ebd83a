"""The one place where a gRPC handler's failure becomes an answer to the client.

Every method of the broker's services (apache.rocketmq.v2 MessagingService,
skiff.records.v1, skiff.admin.v1) is wrapped by :func:`rpc_boundary`:

- a request that did not parse (:class:`Undecodable`) ends with INVALID_ARGUMENT;
- an abort the handler made itself passes through unchanged;
- an error the service expects (its own request errors) is answered by the
  service's ``answer``, in that service's protocol;
- anything else is a fault of the broker: it is logged with its traceback and
  answered by the same ``answer`` given :data:`UNEXPECTED`, so the client reads
  "the broker failed; see its log" and the broker keeps serving.

A server-streaming method (:func:`rpc_stream_boundary`) keeps what it already
sent; the answer to its failure is its last response.

A plain (not async) handler runs on the event loop, so it must not wait for the
disk or the network; one that does (writes a state file with fsync, reads what
may not be in memory) is declared ``off_loop`` and runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from .undecodable import Undecodable, refuse

log = logging.getLogger(__name__)

UNEXPECTED_MESSAGE = "the broker failed; see its log"


class UnexpectedFailure(Exception):
    """Stands for an error no service expects; its message is all the client sees."""


UNEXPECTED = UnexpectedFailure(UNEXPECTED_MESSAGE)

# Given the call's context and the error (an expected one, or UNEXPECTED), the
# response to return; or it aborts the call.
Answer = Callable[[grpc.aio.ServicerContext, Exception], Awaitable[Any]]


def rpc_boundary(
    answer: Answer,
    *,
    expected: tuple[type[Exception], ...] = (),
    with_context: bool = True,
    off_loop: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Awaitable[Any]]]:
    """Decorate a servicer method ``(self, request[, context])``, plain or async.

    ``with_context=False`` is for handlers that take no context (they report
    errors only by raising). ``off_loop``: a plain handler that may block runs in
    a worker thread (with the caller's context variables), never on the loop.
    """

    def wrap(handler: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        name = handler.__qualname__
        if off_loop and inspect.iscoroutinefunction(handler):
            raise TypeError(f"{name} is async: off_loop is for plain handlers that block")

        @functools.wraps(handler)
        async def call(self: object, request: Any, context: grpc.aio.ServicerContext) -> Any:
            if isinstance(request, Undecodable):
                await refuse(context, request)
            try:
                args = (self, request, context) if with_context else (self, request)
                if off_loop:
                    result = await asyncio.to_thread(handler, *args)
                else:
                    result = handler(*args)
                if inspect.isawaitable(result):
                    result = await result
                return result
            except grpc.aio.AbortError:
                raise
            except expected as exc:
                return await answer(context, exc)
            except Exception:
                log.exception("%s failed", name)
                return await answer(context, UNEXPECTED)

        return call

    return wrap


def rpc_stream_boundary(
    answer: Answer,
) -> Callable[[Callable[..., AsyncIterator[Any]]], Callable[..., AsyncIterator[Any]]]:
    """As :func:`rpc_boundary`, for a server-streaming method ``(self, request, context)``."""

    def wrap(handler: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
        name = handler.__qualname__

        @functools.wraps(handler)
        async def call(
            self: object, request: Any, context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            if isinstance(request, Undecodable):
                await refuse(context, request)
            try:
                async for response in handler(self, request, context):
                    yield response
            except grpc.aio.AbortError:
                raise
            except Exception:
                log.exception("%s failed", name)
                yield await answer(context, UNEXPECTED)

        return call

    return wrap
