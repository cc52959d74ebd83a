"""What every handler shares, kept in kopf's memo as ``memo.state``."""

from __future__ import annotations

import dataclasses

from .broker_endpoints import EndpointResolver
from .config import OperatorConfig
from .kube_api import KubeApi


@dataclasses.dataclass(slots=True)
class OperatorState:
    config: OperatorConfig
    api: KubeApi
    resolver: EndpointResolver

    @property
    def retry_delay(self) -> float:
        return self.config.retry_delay_s

    @property
    def admin_timeout(self) -> float:
        return self.config.admin_timeout_s
