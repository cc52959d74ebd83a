"""What every handler shares, kept in kopf's memo as ``memo.state``."""

from __future__ import annotations

import asyncio
import dataclasses

from .admin_access import AdminCredentials
from .broker_endpoints import EndpointResolver
from .config import OperatorConfig
from .kube_api import KubeApi


@dataclasses.dataclass(slots=True)
class OperatorState:
    config: OperatorConfig
    api: KubeApi
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
