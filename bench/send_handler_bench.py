"""CPU per SendMessage call in the broker's handler alone (no gRPC), for two code trees.

Runs the real ``Sender`` over a real store (ASYNC_FLUSH, in a temporary directory under
``--data-dir``) with requests shaped like the official Java client's (one 1 KiB message,
message id, born host and timestamp, NORMAL type), one call at a time (the loop
turning between calls, as a server's does between requests) and 256 at once, in a
child process per code tree. Trees alternate over ``--rounds``; the table shows the median
process CPU µs per call of each tree and the candidate's ratio to the baseline.

    python bench/send_handler_bench.py --baseline /path/to/old/checkout [--rounds 5]
                                       [--telemetry]

``--telemetry``: the store observed as by a broker exporting traces and metrics at the
default ratio (1% of requests traced, every append timed; spans go to no exporter).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import asyncio, json, shutil, sys, tempfile, time, uuid
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from skiff_broker.config import BrokerConfig
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.runtime import Broker
from skiff_broker.messaging.sending import Sender
from skiff_broker.store.config import StoreConfig

calls, data_dir = int(sys.argv[1]), tempfile.mkdtemp(dir=sys.argv[2])
telemetry = sys.argv[3] == "telemetry"
observer = None
if telemetry:
    # As a broker exporting traces and metrics at the default ratio: the ratio decided
    # per request first (an unsampled request runs in the one unsampled context), spans
    # recorded (to no exporter) for the sampled ones, every append timed.
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    from skiff_broker.telemetry.latency_histograms import HistogramSet
    from skiff_broker.telemetry.root_sampling import PresetTraceIds, RootSampling
    from skiff_broker.telemetry.store_observer import StoreTelemetry
    ids = PresetTraceIds()
    roots = RootSampling(0.01, ids)
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.01)), id_generator=ids)
    tracer = provider.get_tracer("bench")
    observer = StoreTelemetry(tracer_provider=provider, histograms=HistogramSet("bench"),
                              broker_name="bench", roots=roots)
broker = Broker(BrokerConfig(store=StoreConfig(data_dir=data_dir)), observer=observer)
broker.start()
broker.topics.put(TopicConfig("bench", 8, 8))
sender = Sender(broker)

def request():
    system = pb.SystemProperties(
        message_id=uuid.uuid4().hex.upper(), born_host="10.0.0.1",
        born_timestamp=Timestamp(seconds=1_700_000_000), message_type=pb.MessageType.NORMAL,
        body_encoding=pb.Encoding.IDENTITY, tag="TagA")
    message = pb.Message(topic=pb.Resource(name="bench"), body=b"x" * 1024,
                         system_properties=system)
    return spb.SendMessageRequest(messages=[message])

async def send(r):
    if not telemetry:
        return await sender.send(r, "127.0.0.1")
    ctx, span = roots.unsampled_context(), None
    if ctx is None:
        span = tracer.start_span("rpc", context=Context())
        ctx = trace.set_span_in_context(span, Context())
    token = otel_context.attach(ctx)
    try:
        return await sender.send(r, "127.0.0.1")
    finally:
        otel_context.detach(token)
        if span is not None:
            span.end()

async def one_at_a_time(requests):
    for r in requests:
        response = await send(r)
        assert response.status.code == 20000, response
        await asyncio.sleep(0)  # a server's loop turns between one client's requests

async def concurrent(requests):
    for i in range(0, len(requests), 256):
        responses = await asyncio.gather(
            *(send(r) for r in requests[i : i + 256]))
        assert all(r.status.code == 20000 for r in responses)

figures = {}
for name, shape in (("one at a time", one_at_a_time), ("256 at once", concurrent)):
    requests = [request() for _ in range(calls)]
    started = time.process_time()
    asyncio.run(shape(requests))
    figures[name] = (time.process_time() - started) / calls * 1e6
broker.stop()
shutil.rmtree(data_dir)
print(json.dumps(figures))
"""


def _run(tree: Path, calls: int, data_dir: str, telemetry: bool) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree / "broker")}
    observed = "telemetry" if telemetry else "none"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(calls), data_dir, observed],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = Path(__file__).resolve().parent.parent
    parser.add_argument("--baseline", type=Path, required=True, help="root of the old checkout")
    parser.add_argument("--candidate", type=Path, default=here, help="default: this checkout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--data-dir", default=".")
    parser.add_argument(
        "--telemetry",
        action="store_true",
        help="observe the store as a broker exporting traces and metrics does (default ratio)",
    )
    args = parser.parse_args()
    trees = {"baseline": args.baseline.resolve(), "candidate": args.candidate.resolve()}
    figures: dict[str, dict[str, list[float]]] = {tag: {} for tag in trees}
    print(f"load average before: {os.getloadavg()}", flush=True)
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for tag in order:
            for shape, value in _run(trees[tag], args.calls, args.data_dir, args.telemetry).items():
                figures[tag].setdefault(shape, []).append(value)
    print(f"load average after: {os.getloadavg()}")
    print("\n| shape | baseline µs/call | candidate µs/call | ratio |\n|---|---|---|---|")
    for shape, values in figures["baseline"].items():
        base = statistics.median(values)
        cand = statistics.median(figures["candidate"][shape])
        print(f"| {shape} | {base:.1f} | {cand:.1f} | {cand / base:.2f}x |")


if __name__ == "__main__":
    main()
