"""OpenTelemetry for the broker: spans and latency histograms of appends and flushes,
SERVER spans of gRPC calls, all configured from the standard ``OTEL_*`` variables.

The store does not import this package; it reports through ``store.observer``.
"""

from .setup import Telemetry, telemetry_from_env

__all__ = ["Telemetry", "telemetry_from_env"]
