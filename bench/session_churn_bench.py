"""Broker memory while consumers come and go: does what a client leaves behind add up?

A real broker process; each round, ``--clients`` consumers arrive at once (each on its
own connection: a Telemetry stream with Settings, a heartbeat, a receive) and leave,
half by NotifyClientTermination and half by dropping the connection. After each round
the bench waits until the broker's ``skiff_client_sessions`` gauge is back at zero (or
``--settle`` seconds) and prints the broker's resident memory and the sessions it still
remembers. Released sessions show as a flat RSS after the first rounds (allocator
pools are kept, so the first rounds grow); ``--client-expiry`` far beyond the run shows
what keeping every session costs.

    python bench/session_churn_bench.py [--clients 200] [--rounds 10]
                                        [--client-expiry 1] [--settle 30] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "broker")]

from tests.support.broker_process import create_topics, data_dir_of, running_broker  # noqa: E402
from tests.support.metrics_scrape import client_sessions  # noqa: E402
from tests.support.process_stats import resident_bytes  # noqa: E402
from tests.support.session_churn import visit  # noqa: E402

from skiff_broker.metadata.topic_table import TopicConfig  # noqa: E402

TOPIC = "churned"
GROUP = "churners"


def remembered(metrics_url: str) -> int:
    return client_sessions(metrics_url, "simple_consumer")


def settle(metrics_url: str, seconds: float) -> int:
    """Sessions still remembered once none is, or after ``seconds``."""
    end = time.monotonic() + seconds
    while (left := remembered(metrics_url)) and time.monotonic() < end:
        time.sleep(0.2)
    return left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--client-expiry", type=float, default=1.0)
    parser.add_argument("--settle", type=float, default=30.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        create_topics(data_dir_of(Path(tmp)), TopicConfig(TOPIC, 4, 4))
        with running_broker(
            Path(tmp),
            "--client-expiry",
            str(args.client_expiry),
            # Debug mode (the tests' slow-callback report) keeps more per task.
            env={"SKIFF_SLOW_CALLBACK_REPORT_MS": "0"},
        ) as broker:
            pid = broker.proc.pid
            start_rss = resident_bytes(pid)
            print(f"start: RSS {start_rss / 2**20:.1f} MiB")
            for number in range(args.rounds):
                half = args.clients // 2
                began = time.perf_counter()

                async def one_round(number: int = number, half: int = half) -> None:
                    await asyncio.gather(
                        visit(
                            broker.endpoint,
                            half,
                            group=GROUP,
                            topic=TOPIC,
                            how="terminate",
                            prefix=f"r{number}-t",
                        ),
                        visit(
                            broker.endpoint,
                            args.clients - half,
                            group=GROUP,
                            topic=TOPIC,
                            how="disconnect",
                            prefix=f"r{number}-d",
                        ),
                    )

                asyncio.run(one_round())
                churn_s = time.perf_counter() - began
                left = settle(broker.metrics_url, args.settle)
                rss = resident_bytes(pid)
                rows.append({"round": number + 1, "rss": rss, "sessions": left, "s": churn_s})
                print(
                    f"round {number + 1:3d}: {args.clients} clients in {churn_s:5.1f} s, "
                    f"sessions left {left:5d}, RSS {rss / 2**20:7.1f} MiB "
                    f"({(rss - start_rss) / 2**10:+.0f} KiB since start)"
                )
    if len(rows) > 2:
        # From the second round on: the first one grows the allocator's pools.
        grown = rows[-1]["rss"] - rows[1]["rss"]
        clients = args.clients * (len(rows) - 2)
        print(
            f"RSS growth rounds 2..{len(rows)}: {grown / 2**10:+.0f} KiB, "
            f"{grown / clients:+.0f} B per client that left"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "rounds": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
