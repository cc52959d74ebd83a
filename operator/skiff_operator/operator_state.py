"""What every handler shares, kept in kopf's memo as ``memo.state``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from .admin_access import AdminCredentials
from .broker_endpoints import EndpointResolver
from .config import OperatorConfig
from .kube_client import KubeClient


@dataclasses.dataclass(slots=True)
class OperatorState:
    config: OperatorConfig
    api: KubeClient
    resolver: EndpointResolver
    # How each Broker's admin service is called (signed as its super user when auth is on).
    admin: AdminCredentials
    # One reconcile at a time per object: a timer and a change handler may fire together.
    _locks: dict[tuple[str, ...], asyncio.Lock] = dataclasses.field(default_factory=dict)

    def lock_for(self, *key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def forget(self, *key: str) -> None:
        self._locks.pop(key, None)

    @property
    def retry_delay(self) -> float:
        return self.config.retry_delay_s

    @property
    def admin_timeout(self) -> float:
        return self.config.admin_timeout_s


Reconcile = Callable[
    [OperatorState, kopf.Body, kopf.Spec, str, str, kopf.Patch, logging.Logger], Awaitable[None]
]
Delete = Callable[[OperatorState, kopf.Spec, str, str, logging.Logger], Awaitable[None]]
Handler = Callable[..., Awaitable[None]]


def one_at_a_time(kind: str, reconcile: Reconcile) -> Handler:
    """The kopf handler running ``reconcile`` under the object's lock (see ``lock_for``).

    ``reconcile`` itself takes no lock, so it may call itself to go round again.
    """

    async def handler(
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        namespace: str,
        patch: kopf.Patch,
        memo: kopf.Memo,
        logger: logging.Logger,
        **_: Any,
    ) -> None:
        state: OperatorState = memo.state
        async with state.lock_for(kind, namespace, name):
            await reconcile(state, body, spec, name, namespace, patch, logger)

    handler.__doc__ = reconcile.__doc__
    return handler


def finalizer(kind: str, delete: Delete) -> Handler:
    """The kopf delete handler running ``delete`` under the object's lock, then dropping it."""

    async def handler(
        spec: kopf.Spec,
        name: str,
        namespace: str,
        memo: kopf.Memo,
        logger: logging.Logger,
        **_: Any,
    ) -> None:
        state: OperatorState = memo.state
        async with state.lock_for(kind, namespace, name):
            await delete(state, spec, name, namespace, logger)
        state.forget(kind, namespace, name)

    handler.__doc__ = delete.__doc__
    return handler
