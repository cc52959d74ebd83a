"""Admin operations at production counts: topic creates and the consumer-group list.

Two figures the admin API must keep linear in what it holds:

- **topic creates/s** with N topics already in the table: a real broker starts on a data
  directory whose topics.json holds N topics, then creates ``--creates`` more one by one
  through the admin API (each waits for its answer, as `skiff topic create` in a loop
  does). The baseline measured in the same run is the disk's own rate of 4 KiB
  ``pwrite`` + ``fdatasync`` in the data directory: no durable create can beat it, so the
  ratio says how much of the disk's rate a create keeps.
- **filling a table**: ``--fill N`` creates N topics one by one on an empty broker and
  prints the whole run's creates/s.
- **`group list` time** with G consumer groups and G live consumers (one heartbeat each,
  as official clients send every 10 s): the median of five ``ListConsumerGroups`` calls.
  The ratio of the large to the small count says whether the cost grows with groups +
  sessions (about the count ratio) or with their product (its square).

    python bench/admin_scale_bench.py [--topics 1000,10000] [--groups 100,1000]
                                      [--creates N] [--fill N] [--data-dir DIR]
                                      [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "broker")]

import grpc  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as spb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc  # noqa: E402
from tests.support.broker_process import data_dir_of, running_broker  # noqa: E402

from skiff_broker.client.admin import AdminClient  # noqa: E402
from skiff_broker.metadata.topic_table import TopicConfig, TopicTable  # noqa: E402


def fdatasync_rate(directory: Path, seconds: float = 1.0) -> float:
    """4 KiB pwrite + fdatasync a second, over an allocated, synced file."""
    path = directory / "sync-probe"
    block = b"\0" * 4096
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.pwrite(fd, b"\0" * (1 << 20), 0)
        os.fsync(fd)
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            os.pwrite(fd, block, (done % 256) * 4096)
            os.fdatasync(fd)
            done += 1
        return done / (time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()


def seed_topics(work_dir: Path, count: int) -> None:
    """A topics.json holding ``count`` topics, written once, for a broker of ``work_dir``."""
    table = TopicTable(str(data_dir_of(work_dir) / "config" / "topics.json"))
    table.load()
    documents = {
        f"seeded-{i:06d}": TopicConfig(f"seeded-{i:06d}", 8, 8).to_json() for i in range(count)
    }
    table.replace_all(documents)


def topic_creates(work: Path, existing: int, creates: int) -> dict[str, float]:
    data_dir = work / f"topics-{existing}"
    seed_topics(data_dir, existing)
    baseline = fdatasync_rate(work)
    with running_broker(data_dir) as broker, AdminClient(broker.endpoint) as admin:
        admin.create_topic("warm-up", read_queues=8)
        started = time.perf_counter()
        for i in range(creates):
            admin.create_topic(f"created-{i:06d}", read_queues=8)
        elapsed = time.perf_counter() - started
        assert len(admin.list_topics()) >= existing + creates
    rate = creates / elapsed
    return {"existing": existing, "creates_per_s": rate, "fdatasync_per_s": baseline}


def fill(work: Path, count: int) -> dict[str, float]:
    data_dir = work / f"fill-{count}"
    data_dir.mkdir()
    with running_broker(data_dir) as broker, AdminClient(broker.endpoint) as admin:
        started = time.perf_counter()
        for i in range(count):
            admin.create_topic(f"filled-{i:06d}", read_queues=8)
        elapsed = time.perf_counter() - started
    return {"created": count, "creates_per_s": count / elapsed}


def heartbeat(channel: grpc.Channel, group: str, client_id: str) -> None:
    reply = service_pb2_grpc.MessagingServiceStub(channel).Heartbeat(
        spb.HeartbeatRequest(
            group=pb.Resource(name=group), client_type=pb.ClientType.SIMPLE_CONSUMER
        ),
        metadata=[("x-mq-client-id", client_id)],
        timeout=30,
    )
    assert reply.status.code == pb.Code.OK, reply.status


def group_list(work: Path, groups: int) -> dict[str, float]:
    data_dir = work / f"groups-{groups}"
    data_dir.mkdir()
    with running_broker(data_dir) as broker:
        with grpc.insecure_channel(broker.endpoint) as channel:
            for i in range(groups):
                heartbeat(channel, f"bench-group-{i:05d}", f"bench-consumer-{i:05d}")
        with AdminClient(broker.endpoint) as admin:
            times = []
            for _ in range(5):
                started = time.perf_counter()
                listed = admin.list_consumer_groups()
                times.append(time.perf_counter() - started)
            assert len(listed) >= groups, len(listed)
    return {"groups": groups, "list_s": statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", default="1000,10000")
    parser.add_argument("--groups", default="100,1000")
    parser.add_argument("--creates", type=int, default=200)
    parser.add_argument("--fill", type=int, default=0)
    parser.add_argument("--data-dir", default=".")
    parser.add_argument("--json")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"topics": [], "groups": [], "fill": []}
    with tempfile.TemporaryDirectory(dir=args.data_dir, prefix="admin-scale-") as tmp:
        work = Path(tmp)
        for count in (int(n) for n in args.topics.split(",") if n):
            row = topic_creates(work, count, args.creates)
            results["topics"].append(row)
            print(
                f"topic creates with {count:>6} topics: {row['creates_per_s']:8.1f}/s "
                f"(disk's fdatasync {row['fdatasync_per_s']:.0f}/s, ratio "
                f"{row['creates_per_s'] / row['fdatasync_per_s']:.3f})",
                flush=True,
            )
        if args.fill:
            row = fill(work, args.fill)
            results["fill"].append(row)
            print(
                f"{args.fill} topics created one by one: {row['creates_per_s']:.1f}/s", flush=True
            )
        for count in (int(n) for n in args.groups.split(",") if n):
            row = group_list(work, count)
            results["groups"].append(row)
            print(
                f"group list, {count:>5} groups and consumers: {row['list_s'] * 1000:9.1f} ms",
                flush=True,
            )
    rows = results["groups"]
    if len(rows) >= 2:
        small, large = rows[0], rows[-1]
        print(
            f"group list time ratio {large['list_s'] / small['list_s']:.1f} for "
            f"{large['groups'] / small['groups']:.0f}x the groups and consumers"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
