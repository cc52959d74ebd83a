#!/usr/bin/env python3
"""What telemetry costs one untraced request, piece by piece, in this process.

Each line times one piece of the per-request work of a broker at the default sampling
(``timeit``, best of ``--repeat``) against the way the SDK alone would do it, both
measured in the same run, and prints their ratio:

- the SERVER span of a request without a caller's trace: the ratio decision made first
  (``root_sampling``) against asking the SDK's tracer (``start_span``) for every request;
- RocketMQ's metrics of one SendMessage (``BrokerMetrics.received``): the broker's
  running totals read as observable counters, against two ``Counter.add`` calls of the
  SDK's synchronous counters with the same attributes (both with the size histogram).

The end-to-end figure is ``bench/telemetry_bench.py`` (a real broker, off/on pairs);
this one says where a change to the hot path moves it. Run from the repository root:
``python bench/telemetry_hot_path.py [--calls N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "broker")]

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased  # noqa: E402

from skiff_broker.telemetry import conventions as cv  # noqa: E402
from skiff_broker.telemetry.broker_metrics import BrokerMetrics  # noqa: E402
from skiff_broker.telemetry.latency_histograms import HistogramSet  # noqa: E402
from skiff_broker.telemetry.root_sampling import PresetTraceIds, RootSampling  # noqa: E402
from skiff_broker.telemetry.server_interceptor import TracingInterceptor  # noqa: E402
from skiff_broker.telemetry.setup import DEFAULT_SAMPLE_RATIO  # noqa: E402

SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"
# What an official client sends: no traceparent.
METADATA = (("x-mq-client-id", "bench"), ("x-mq-language", "JAVA"), ("user-agent", "grpc"))


class _Call:
    def invocation_metadata(self) -> tuple:
        return METADATA


def per_call_us(work: Callable[[], object], calls: int, repeat: int) -> float:
    return min(timeit.repeat(work, number=calls, repeat=repeat)) / calls * 1e6


def span_start(calls: int, repeat: int) -> tuple[float, float]:
    """(decided first, SDK decides) microseconds per untraced request's SERVER span."""
    ids = PresetTraceIds()
    sampler = ParentBased(TraceIdRatioBased(DEFAULT_SAMPLE_RATIO))
    provider = TracerProvider(sampler=sampler, id_generator=ids)
    roots = RootSampling(DEFAULT_SAMPLE_RATIO, ids)
    first = TracingInterceptor(provider, "bench", roots)._starter(SEND)
    sdk = TracingInterceptor(provider, "bench")._starter(SEND)
    call = _Call()
    try:
        return (
            per_call_us(lambda: first(call, None), calls, repeat),
            per_call_us(lambda: sdk(call, None), calls, repeat),
        )
    finally:
        provider.shutdown()


def counters(calls: int, repeat: int) -> tuple[float, float]:
    """(running totals, SDK counters) microseconds per SendMessage's metrics."""
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    histograms = HistogramSet(cv.STORE_SCOPE)
    metrics = BrokerMetrics(
        provider.get_meter("bench"),
        histograms,
        cluster="bench",
        node_id="bench-0",
        backlog=list,
    )
    meter = provider.get_meter("bench-sdk")
    messages = meter.create_counter("sdk_messages_in")
    throughput = meter.create_counter("sdk_throughput_in")
    message_size = histograms.histogram(
        "sdk_message_size",
        unit="",
        description="",
        bounds=cv.MESSAGE_SIZE_BUCKETS,
        labels=(cv.LABEL_TOPIC, cv.LABEL_MESSAGE_TYPE),
    )
    sizes = [100]
    attributes = {
        cv.LABEL_CLUSTER: "bench",
        cv.LABEL_NODE_TYPE: cv.NODE_TYPE_BROKER,
        cv.LABEL_NODE_ID: "bench-0",
        cv.LABEL_TOPIC: "BenchTopic",
        cv.LABEL_MESSAGE_TYPE: "normal",
    }

    key = ("BenchTopic", "normal")

    def sdk_counters() -> None:
        # What received() did before: the SDK's counters, the broker's size histogram.
        messages.add(len(sizes), attributes)
        throughput.add(sum(sizes), attributes)
        for size in sizes:
            message_size.record(size, key)

    try:
        return (
            per_call_us(lambda: metrics.received("BenchTopic", "normal", sizes), calls, repeat),
            per_call_us(sdk_counters, calls, repeat),
        )
    finally:
        provider.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings per piece (best kept)")
    args = parser.parse_args()
    for name, (ours, sdk) in (
        ("SERVER span of an untraced request", span_start(args.calls, args.repeat)),
        ("metrics of one SendMessage", counters(args.calls, args.repeat)),
    ):
        print(f"{name}: {ours:.2f} us, SDK alone {sdk:.2f} us; ratio {ours / sdk:.3f}")


if __name__ == "__main__":
    main()
