"""OpenTelemetry for the broker: spans and latency histograms of appends and flushes,
SERVER spans of gRPC calls, all configured from the standard ``OTEL_*`` variables, and
RocketMQ's broker metrics, exported over OTLP and served at /metrics from one set of
instruments.

The store does not import this package; it reports through ``store.observer``.
"""

from .setup import Telemetry, telemetry_from_env

__all__ = ["Telemetry", "telemetry_from_env"]
