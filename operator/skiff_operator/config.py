"""The operator's settings, filled from ``skiff-operator`` flags and SKIFF_OPERATOR_* variables."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .broker_endpoints import DEFAULT_TEMPLATE, EndpointResolver
from .rendering import RenderSettings


@dataclasses.dataclass(frozen=True, slots=True)
class OperatorConfig:
    # Namespaces to watch; empty watches the whole cluster.
    namespaces: tuple[str, ...] = ()
    default_broker_image: str = "skiff/broker:0.1.0"
    cluster_domain: str = "cluster.local"
    # How the operator reaches a group's master; see broker_endpoints.py.
    broker_endpoint_template: str = DEFAULT_TEMPLATE
    # Seconds between refreshes of Broker status (ready pods) and Topic re-checks.
    status_interval_s: float = 10.0
    topic_resync_interval_s: float = 60.0
    # Seconds before a reconcile that waits on something (a broker, draining) retries.
    retry_delay_s: float = 15.0
    # Timeout of one admin call to a broker.
    admin_timeout_s: float = 10.0
    liveness_endpoint: str = "http://0.0.0.0:8080/healthz"
    # Who may scrape /metrics of Brokers that name nobody themselves (metrics_access.py).
    metrics_allow_from: tuple[Mapping[str, Any], ...] = ()

    def render_settings(self) -> RenderSettings:
        return RenderSettings(
            default_image=self.default_broker_image,
            cluster_domain=self.cluster_domain,
            metrics_allow_from=self.metrics_allow_from,
        )

    def endpoint_resolver(self) -> EndpointResolver:
        return EndpointResolver(self.broker_endpoint_template, self.cluster_domain)

    def validate(self) -> None:
        # Formats a sample name, so a bad template fails at start, not at first reconcile.
        self.endpoint_resolver().master_endpoint("default", "sample", 0)
        if self.status_interval_s <= 0 or self.topic_resync_interval_s <= 0:
            raise ValueError("the status and topic re-check intervals must be positive")
        if self.retry_delay_s <= 0 or self.admin_timeout_s <= 0:
            raise ValueError("the retry delay and admin timeout must be positive")
