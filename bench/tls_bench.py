#!/usr/bin/env python3
"""What TLS on the client port costs: permissive plaintext and permissive TLS against disabled.

Starts two real brokers (``--tls-mode disabled`` and ``--tls-mode permissive``) and drives
each with the same load in interleaved rounds: SendMessage calls from concurrent callers on
one gRPC channel, with small bodies (per-call cost) and large bodies (bytes through TLS).
Prints messages/s, MiB/s and the broker's CPU time per message for each configuration, with
the ratio of each to disabled measured in this run.
Run ``python bench/tls_bench.py --help``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "broker"))
sys.path.insert(0, str(ROOT))

from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as spb  # noqa: E402
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub  # noqa: E402
from tests.support.broker_process import start_broker  # noqa: E402
from tests.support.process_stats import cpu_seconds  # noqa: E402

from skiff_broker.client.channels import ClientTls, aio_channel  # noqa: E402

TOPIC = "tls-bench"
WORKLOADS = {"small (256 B)": 256, "large (256 KiB)": 256 * 1024}


async def _send_rate(
    endpoint: str, tls: ClientTls, body_size: int, callers: int, seconds: float, pid: int
) -> tuple[float, float]:
    """Messages per second acknowledged over ``seconds``, and broker CPU seconds per message."""
    body = b"x" * body_size
    done = 0
    stop = False
    async with aio_channel(
        endpoint, tls=tls, options=[("grpc.max_send_message_length", -1)]
    ) as channel:
        stub = MessagingServiceStub(channel)

        async def caller() -> None:
            nonlocal done
            while not stop:
                message = pb.Message(
                    topic=pb.Resource(name=TOPIC),
                    body=body,
                    system_properties=pb.SystemProperties(
                        message_id=uuid.uuid4().hex.upper(),
                        message_type=pb.MessageType.NORMAL,
                    ),
                )
                response = await stub.SendMessage(
                    spb.SendMessageRequest(messages=[message]), timeout=60
                )
                assert response.status.code == pb.Code.OK, response.status
                done += 1

        tasks = [asyncio.create_task(caller()) for _ in range(callers)]
        await asyncio.sleep(min(1.0, seconds / 3))  # warm-up: connection, handshake
        start_count, started, cpu = done, time.perf_counter(), cpu_seconds(pid)
        await asyncio.sleep(seconds)
        sent = done - start_count
        rate = sent / (time.perf_counter() - started)
        cpu_per_message = (cpu_seconds(pid) - cpu) / max(sent, 1)
        stop = True
        await asyncio.gather(*tasks)
    return rate, cpu_per_message


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per round and case")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--callers", type=int, default=16, help="concurrent calls")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="skiff-tls-bench-") as root:
        for name in ("disabled", "permissive"):
            Path(root, name).mkdir()
        disabled = start_broker(
            Path(root, "disabled"), "--tls-mode", "disabled", "--auto-create-topics"
        )
        permissive = start_broker(
            Path(root, "permissive"), "--tls-mode", "permissive", "--auto-create-topics"
        )
        try:
            cert = str(permissive.data_dir / "tls" / "self-signed.crt")
            cases = {
                "disabled, plaintext": (disabled, ClientTls()),
                "permissive, plaintext": (permissive, ClientTls()),
                "permissive, TLS": (permissive, ClientTls(True, cert)),
            }
            results: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for _ in range(args.rounds):
                for workload, size in WORKLOADS.items():
                    for case, (broker, tls) in cases.items():
                        measured = asyncio.run(
                            _send_rate(
                                broker.endpoint,
                                tls,
                                size,
                                args.callers,
                                args.seconds,
                                broker.proc.pid,
                            )
                        )
                        results.setdefault((workload, case), []).append(measured)
        finally:
            for broker in (disabled, permissive):
                broker.stop()

    print(
        f"SendMessage, {args.callers} concurrent calls on one channel, median of "
        f"{args.rounds} rounds of {args.seconds:g} s; 2 broker processes on this machine"
    )
    print(
        f"{'workload':<17} {'case':<22} {'msg/s':>9} {'MiB/s':>8} {'x disabled':>11} "
        f"{'brk cpu/msg':>12} {'x disabled':>11}"
    )
    for workload, size in WORKLOADS.items():
        base_rate = statistics.median(r for r, _ in results[(workload, "disabled, plaintext")])
        base_cpu = statistics.median(c for _, c in results[(workload, "disabled, plaintext")])
        for case in cases:
            rate = statistics.median(r for r, _ in results[(workload, case)])
            cpu = statistics.median(c for _, c in results[(workload, case)])
            mib = rate * size / 2**20
            print(
                f"{workload:<17} {case:<22} {rate:>9.0f} {mib:>8.1f} {rate / base_rate:>10.2f}x "
                f"{cpu * 1e6:>9.0f} µs {cpu / base_cpu:>10.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
