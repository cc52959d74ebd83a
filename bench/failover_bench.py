#!/usr/bin/env python3
"""Failover by Lease: time from a master's SIGKILL to the first acknowledged write after it.

Run ``python bench/failover_bench.py --help``. Needs the API-server binaries of
``scripts/k8s-binaries`` (as the tests/k8s tier does).

Each run starts a fresh group of three real brokers (``--role LEASE``, SYNC
replication, the default Lease duration of 15 s unless ``--lease-duration``)
holding a real Lease on a real kube-apiserver, through the brokers' RBAC. A
client sends one message at a time to the group's master while it runs; at a
random point the master is SIGKILLed, and the client keeps sending, in turn to
each surviving broker (an application retrying over its bootstrap addresses;
a replica refuses at once). Reported per run: seconds from the SIGKILL to the first acknowledged
write on the new master, and the sends that failed in between. The summary gives
min, median, p90 and max over the runs.
"""

from __future__ import annotations

import argparse
import datetime
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "broker"))
sys.path.insert(0, str(ROOT))

from tests.k8s.cluster_members import Cluster  # noqa: E402
from tests.support.kube_control_plane import binaries_dir, running_control_plane  # noqa: E402

from skiff_broker.client.messaging import MessagingClient, OutgoingMessage  # noqa: E402

GROUP = "bench-a"
PODS = [f"{GROUP}-0", f"{GROUP}-1", f"{GROUP}-2"]
TOPIC = "payments"
SEND_TIMEOUT_S = 2.0


def send_once(endpoint: str, body: bytes) -> bool:
    try:
        with MessagingClient(endpoint, timeout=SEND_TIMEOUT_S) as client:
            client.send([OutgoingMessage(TOPIC, body)])
        return True
    except Exception:
        return False


def took_over(cluster: Cluster, pod: str) -> float:
    """Wall time of the new master's "took the Lease" log line."""
    for record in cluster.brokers[pod].log_lines():
        if record.get("msg", "").startswith("took the Lease"):
            stamp = datetime.datetime.fromisoformat(record["ts"].replace("Z", "+00:00"))
            return stamp.timestamp()
    return float("nan")


def one_run(cluster: Cluster, number: int) -> tuple[float, int, float]:
    cluster.start(GROUP, PODS[0])
    cluster.wait_master(GROUP, PODS[0])
    for pod in PODS[1:]:
        cluster.start(GROUP, pod)
    cluster.wait_master(GROUP, PODS[0], in_sync=set(PODS))
    master = cluster.brokers[PODS[0]]
    # Load until a random moment of the Lease's renewal cycle.
    until = time.monotonic() + random.uniform(2.0, 6.0)
    sent = 0
    while time.monotonic() < until:
        assert send_once(master.endpoint, b"before-%d-%d" % (number, sent))
        sent += 1
    master.kill()
    killed = time.monotonic()
    killed_wall = time.time()
    errors = 0
    survivors = [cluster.brokers[pod].endpoint for pod in PODS[1:]]
    while True:
        # As an application retrying over its bootstrap addresses: a replica refuses
        # at once, the new master acknowledges once it can.
        for pod, endpoint in zip(PODS[1:], survivors, strict=True):
            if send_once(endpoint, b"after-%d" % number):
                return time.monotonic() - killed, errors, took_over(cluster, pod) - killed_wall
            errors += 1
        time.sleep(0.05)
        if time.monotonic() - killed > 120:
            raise SystemExit("no new master within 120 s; see the broker logs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lease-duration", type=int, default=15)
    args = parser.parse_args()
    bin_dir = binaries_dir()
    if bin_dir is None:
        raise SystemExit("build the API-server binaries first: scripts/k8s-binaries")
    times: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="failover-bench-") as work,
        running_control_plane(bin_dir, Path(work) / "plane") as plane,
    ):
        for number in range(args.runs):
            run_dir = Path(work) / f"run-{number}"
            run_dir.mkdir()
            cluster = Cluster(plane, run_dir, lease_duration=args.lease_duration)
            try:
                seconds, errors, takeover = one_run(cluster, number)
            finally:
                cluster.cleanup()
            times.append(seconds)
            print(
                f"run {number + 1}: first acknowledged write {seconds:.2f} s after SIGKILL "
                f"(Lease taken after {takeover:.2f} s); {errors} failed sends meanwhile",
                flush=True,
            )
    ordered = sorted(times)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    print(
        f"lease {args.lease_duration} s, {len(times)} runs: min {ordered[0]:.2f} s, "
        f"median {statistics.median(ordered):.2f} s, p90 {p90:.2f} s, max {ordered[-1]:.2f} s"
    )


if __name__ == "__main__":
    main()
