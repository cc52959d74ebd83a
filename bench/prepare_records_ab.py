#!/usr/bin/env python3
"""The record Append door's per-record CPU (``prepare_records``) in two code trees, in one run.

Each round times ``store.prepared_records.prepare_records`` on the same batch (``--records``
records of ``--body`` bytes, each with nothing but its message ID, as BatchingProducer sends
them) in a child process importing ``skiff_broker`` from the baseline tree and in one from
this tree; the order alternates between rounds. Printed: CPU µs per record of each, the
candidate's ratio per round, and the median ratio. The batch is encoded by this tree's
client code, so only the door differs.

    python bench/prepare_records_ab.py --baseline /path/to/old/checkout [--rounds 5]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tree_runs import imported_tree, run_against

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "bench-batch"


def encode_batch(records: int, body_bytes: int) -> bytes:
    sys.path.insert(0, str(ROOT / "broker"))
    from skiff_broker.client.message_id import new_message_id
    from skiff_broker.client.records import encode_record, topic_field
    from skiff_broker.wire.properties import id_only_properties

    field = topic_field(TOPIC)
    body = os.urandom(body_bytes)
    born = int(time.time() * 1000)
    return b"".join(
        encode_record(field, body, id_only_properties(new_message_id()), born)
        for _ in range(records)
    )


def time_door(batch_path: str, records: int, seconds: float) -> None:
    """Runs in the child: whichever ``skiff_broker`` PYTHONPATH names; prints one JSON line."""
    from skiff_broker.store.prepared_records import prepare_records
    from skiff_broker.wire.property_names import producer_property_problem

    data = Path(batch_path).read_bytes()
    # Older trees take the producer's property rules as an argument; newer ones always
    # apply them.
    rules = (
        {"check_properties": producer_property_problem}
        if "check_properties" in inspect.signature(prepare_records).parameters
        else {}
    )

    def once() -> None:
        prepare_records(
            data,
            TOPIC,
            3,
            born_host=bytes(8),
            store_host=bytes(8),
            max_message_size=4 * 1024 * 1024,
            born_default=1,
            **rules,
        )

    for _ in range(20):  # warm-up
        once()
    calls = 0
    cpu0 = time.process_time()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        once()
        calls += 1
    cpu = time.process_time() - cpu0
    print(
        json.dumps(
            {
                "tree": imported_tree(),
                "us_per_record": cpu / (calls * records) * 1e6,
            }
        )
    )


def measure(tree: Path, batch_path: str, args: argparse.Namespace) -> float:
    argv = [__file__, "--child", batch_path]
    argv += ["--records", str(args.records), "--seconds", str(args.seconds)]
    return run_against(tree, argv)["us_per_record"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="root of the checkout to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0, help="timed per run")
    parser.add_argument("--records", type=int, default=256, help="records per batch")
    parser.add_argument("--body", type=int, default=1024, help="body bytes")
    parser.add_argument("--child", metavar="BATCH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        time_door(args.child, args.records, args.seconds)
        return 0
    if args.baseline is None:
        parser.error("--baseline is required")
    trees = {"baseline": args.baseline.resolve(), "candidate": ROOT}
    with tempfile.NamedTemporaryFile(prefix="skiff-prepare-ab-", suffix=".records") as batch:
        batch.write(encode_batch(args.records, args.body))
        batch.flush()
        runs: dict[str, list[float]] = {"baseline": [], "candidate": []}
        for number in range(args.rounds):
            order = ["baseline", "candidate"]
            if number % 2:
                order.reverse()
            for name in order:
                runs[name].append(measure(trees[name], batch.name, args))
    print(f"prepare_records, {args.records} records of {args.body} B bodies per batch")
    print(f"baseline  {trees['baseline']}\ncandidate {trees['candidate']}")
    print(f"{'round':>5} {'base µs/rec':>12} {'cand µs/rec':>12} {'ratio':>6}")
    ratios = []
    for number, (base, cand) in enumerate(zip(runs["baseline"], runs["candidate"], strict=True)):
        ratios.append(cand / base)
        print(f"{number + 1:>5} {base:>12.2f} {cand:>12.2f} {ratios[-1]:>6.3f}")
    print(f"median candidate/baseline CPU per record: {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
