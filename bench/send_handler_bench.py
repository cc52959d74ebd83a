"""CPU per SendMessage call in the broker's handler alone (no gRPC), for two code trees.

Runs the real ``Sender`` over a real store (ASYNC_FLUSH, in a temporary directory under
``--data-dir``) with requests shaped like the official Java client's (one 1 KiB message,
message id, born host and timestamp, NORMAL type), one call at a time (the loop
turning between calls, as a server's does between requests) and 256 at once, in a
child process per code tree. Trees alternate over ``--rounds``; the table shows the median
process CPU µs per call of each tree and the candidate's ratio to the baseline.

    python bench/send_handler_bench.py --baseline /path/to/old/checkout [--rounds 5]
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
from skiff_broker.server.sending import Sender
from skiff_broker.store.config import StoreConfig

calls, data_dir = int(sys.argv[1]), tempfile.mkdtemp(dir=sys.argv[2])
broker = Broker(BrokerConfig(store=StoreConfig(data_dir=data_dir)))
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

async def one_at_a_time(requests):
    for r in requests:
        response = await sender.send(r, "127.0.0.1")
        assert response.status.code == 20000, response
        await asyncio.sleep(0)  # a server's loop turns between one client's requests

async def concurrent(requests):
    for i in range(0, len(requests), 256):
        responses = await asyncio.gather(
            *(sender.send(r, "127.0.0.1") for r in requests[i : i + 256]))
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


def _run(tree: Path, calls: int, data_dir: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree / "broker")}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(calls), data_dir],
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
    args = parser.parse_args()
    trees = {"baseline": args.baseline.resolve(), "candidate": args.candidate.resolve()}
    figures: dict[str, dict[str, list[float]]] = {tag: {} for tag in trees}
    print(f"load average before: {os.getloadavg()}", flush=True)
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for tag in order:
            for shape, value in _run(trees[tag], args.calls, args.data_dir).items():
                figures[tag].setdefault(shape, []).append(value)
    print(f"load average after: {os.getloadavg()}")
    print("\n| shape | baseline µs/call | candidate µs/call | ratio |\n|---|---|---|---|")
    for shape, values in figures["baseline"].items():
        base = statistics.median(values)
        cand = statistics.median(figures["candidate"][shape])
        print(f"| {shape} | {base:.1f} | {cand:.1f} | {cand / base:.2f}x |")


if __name__ == "__main__":
    main()
