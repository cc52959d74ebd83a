"""Crash-restart time against clean-start time, with a full last segment of 100 B messages.

For each segment size (64 MiB and 1 GiB, the chart's production size) one data
directory is prepared in-process through the store's own append path: one topic of
four queues, 100-byte bodies, until the first segment is full but for a little room
(``--fills``: fractions of the segment to fill instead, one data directory each).
Then, for each code variant ("before": the code at ``--before REV``, by default the
merge base with main, taken with ``git archive``; "after": this checkout), on that same
directory and in that order:

1. a real ``skiff broker`` process starts (a clean start) and a producer sends a few
   hundred more messages into the same, nearly full, segment;
2. after the checkpoint had time to be written, the broker is killed with SIGKILL;
3. a new broker process is launched and timed until it answers a real request
   (GetBrokerInfo) after its "listening on" line: the crash-restart time;
4. it is stopped with SIGTERM and launched again, timed the same way: the clean-start
   time of the same store; then stopped.

With ``--under-load RATE`` the producer of step 1 keeps sending RATE messages a second
(the room left in the segment is sized for it) and the kill lands in the middle of it,
as a crash under traffic would.

Printed, per size and variant: records prepared in the segment, records the crash
recovery checked, both times and their ratio, and how long the background check of
the records below the scan start took (after).

    python bench/restart_bench.py [--sizes 64m,1g] [--fills 0.25,1] [--under-load RATE]
                                  [--before REV] [--work DIR] [--json OUT]

On a branch level with main the merge base is this checkout; name the commit before
the change measured with ``--before``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "broker")]

from skiff_broker.client.admin import AdminClient  # noqa: E402
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage  # noqa: E402
from skiff_broker.metadata.topic_table import TopicConfig, TopicTable  # noqa: E402
from skiff_broker.store.config import StoreConfig  # noqa: E402
from skiff_broker.store.message import Message  # noqa: E402
from skiff_broker.store.message_store import MessageStore  # noqa: E402

TOPIC = "restart-bench"
QUEUES = 4
BODY = b"b" * 100
# Left free in the segment for the broker's own sends, so they land in it.
ROOM = 512 * 1024
SENT_BY_BROKER = 400
START_DEADLINE_S = 1800.0
# Longer than the consume-queue flush interval (1 s) and RocketMQ's 3 s timestamp margin.
CHECKPOINT_WAIT_S = 4.0
SIZES = {"64m": 64 * 1024 * 1024, "1g": 1024 * 1024 * 1024}


def prepare(data_dir: Path, segment: int, room: int = ROOM, fill: float = 1.0) -> int:
    """Fill ``fill`` of ``data_dir``'s first segment with 100 B messages, in-process;
    returns how many."""
    limit = int(segment * fill)
    shutil.rmtree(data_dir, ignore_errors=True)
    table = TopicTable(str(data_dir / "config" / "topics.json"))
    table.load()
    table.put(TopicConfig(TOPIC, QUEUES, QUEUES))
    store = MessageStore(StoreConfig(data_dir=str(data_dir), commit_log_file_size=segment))
    store.start()
    records = 0
    try:
        batch = [Message(TOPIC, BODY, queue_id=q % QUEUES) for q in range(1024)]
        store.put_messages(batch[:1])
        per_record = store.commit_log.max_offset
        records += 1
        while store.commit_log.max_offset + room + len(batch) * per_record < limit:
            store.put_messages(batch)
            records += len(batch)
        while store.commit_log.max_offset + room + per_record < limit:
            store.put_messages(batch[:1])
            records += 1
        assert store.wait_dispatched(600)
    finally:
        store.shutdown()
    return records


def env_for(code: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(code / "broker")}
    for name in [k for k in env if k.startswith("SKIFF_")]:
        del env[name]
    # Free ports: the defaults (8080, 5557) may be taken by another broker on the machine.
    env["SKIFF_REMOTING_LISTEN"] = env["SKIFF_METRICS_LISTEN"] = "127.0.0.1:0"
    return env


class Broker:
    def __init__(self, code: Path, data_dir: Path, segment: int, log: Path) -> None:
        command = [sys.executable, "-m", "skiff_broker", "broker", "--listen", "127.0.0.1:0"]
        command += ["--data-dir", str(data_dir), "--commit-log-file-size", str(segment)]
        self.log = log
        self.launched = time.perf_counter()
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(command, env=env_for(code), stderr=out, stdout=out)
        self.endpoint = self._wait_listening()
        with AdminClient(self.endpoint) as admin:
            admin.broker_info()
        self.serving_s = time.perf_counter() - self.launched

    def lines(self) -> list[dict]:
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
        return found

    def _wait_listening(self) -> str:
        while time.perf_counter() - self.launched < START_DEADLINE_S:
            for record in self.lines():
                message = record.get("msg", "")
                if message.startswith("listening on "):
                    return "127.0.0.1:" + message.rpartition(":")[2]
            if self.proc.poll() is not None:
                raise SystemExit(f"broker exited with {self.proc.returncode}; see {self.log}")
            time.sleep(0.02)
        raise SystemExit(f"broker did not listen within {START_DEADLINE_S} s; see {self.log}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        if self.proc.wait(timeout=START_DEADLINE_S) != 0:
            raise SystemExit(f"broker did not stop cleanly; see {self.log}")

    def background_check_s(self) -> float | None:
        """Seconds between the background check's start and end lines (None: none ran)."""
        began = ended = None
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            for record in self.lines():
                message = record.get("msg", "")
                if message.startswith("checking commit-log records"):
                    began = _stamp(record)
                elif began is not None and (
                    message.endswith("are sound") or "background check of older" in message
                ):
                    ended = _stamp(record)
            if began is None or ended is not None:
                break
            time.sleep(0.2)
        return None if began is None or ended is None else ended - began


def _stamp(record: dict) -> float:
    return datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).timestamp()


def send_some(endpoint: str) -> None:
    with MessagingClient(endpoint) as client:
        for _ in range(SENT_BY_BROKER // 50):
            client.send([OutgoingMessage(TOPIC, BODY) for _ in range(50)])


def send_paced(endpoint: str, rate: int, stop: threading.Event) -> None:
    """``rate`` messages a second in batches of 50 until ``stop`` (or the broker dies)."""
    began = time.perf_counter()
    sent = 0
    try:
        with MessagingClient(endpoint) as client:
            while not stop.is_set():
                client.send([OutgoingMessage(TOPIC, BODY) for _ in range(50)])
                sent += 50
                ahead = sent / rate - (time.perf_counter() - began)
                if ahead > 0:
                    stop.wait(ahead)
    except Exception:
        return  # killed mid-send


def run_variant(name: str, code: Path, data_dir: Path, segment: int, logs: Path, rate: int) -> dict:
    first = Broker(code, data_dir, segment, logs / f"{name}-first.log")
    send_some(first.endpoint)
    stop = threading.Event()
    sender = threading.Thread(target=send_paced, args=(first.endpoint, rate, stop))
    if rate:
        sender.start()
    time.sleep(CHECKPOINT_WAIT_S)
    first.kill()
    stop.set()
    if rate:
        sender.join()
    crashed = Broker(code, data_dir, segment, logs / f"{name}-after-kill.log")
    crash_s = crashed.serving_s
    checked = [
        r["msg"] for r in crashed.lines() if r.get("msg", "").startswith("recovered after a crash")
    ]
    background = crashed.background_check_s() if name == "after" else None
    crashed.stop()
    clean = Broker(code, data_dir, segment, logs / f"{name}-clean.log")
    clean_s = clean.serving_s
    clean.stop()
    rescanned = int(checked[0].split(": ")[1].split(" ")[0]) if checked else -1
    return {
        "rescanned": rescanned,
        "crash_restart_s": round(crash_s, 2),
        "clean_start_s": round(clean_s, 2),
        "ratio": round(crash_s / clean_s, 2),
        "recovery": checked[0] if checked else "",
        "background_check_s": None if background is None else round(background, 2),
    }


def before_code(work: Path, revision: str) -> Path:
    """The code at ``revision`` (empty: this branch's merge base with main), by ``git archive``."""
    asked = ["rev-parse", revision] if revision else ["merge-base", "main", "HEAD"]
    base = subprocess.run(
        ["git", "-C", str(ROOT), *asked],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    target = work / f"before-{base[:10]}"
    if not target.exists():
        target.mkdir(parents=True)
        archive = subprocess.Popen(
            ["git", "-C", str(ROOT), "archive", base, "broker"], stdout=subprocess.PIPE
        )
        subprocess.run(["tar", "-x", "-C", str(target)], stdin=archive.stdout, check=True)
        archive.wait()
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="64m,1g")
    parser.add_argument("--under-load", type=int, default=0, metavar="RATE")
    parser.add_argument("--fills", default="1", metavar="FRACTIONS")
    parser.add_argument("--before", default="", metavar="REV")
    parser.add_argument("--work", default="")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="restart-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    variants = {"before": before_code(work, args.before), "after": ROOT}
    results = []
    # Room for what the broker is sent, about 210 bytes a record, with a margin.
    room = ROOM + args.under_load * 210 * int(CHECKPOINT_WAIT_S + 2) * 2
    for size_name in args.sizes.split(","):
        segment = SIZES[size_name]
        for fill in [float(f) for f in args.fills.split(",")]:
            data_dir = work / f"data-{size_name}-{fill}"
            began = time.perf_counter()
            records = prepare(data_dir, segment, room, fill)
            print(
                f"{size_name} filled {fill}: prepared {records} records "
                f"in {time.perf_counter() - began:.1f} s"
            )
            for name, code in variants.items():
                logs = work / f"logs-{size_name}-{fill}"
                logs.mkdir(exist_ok=True)
                row = {"segment": size_name, "fill": fill, "variant": name, "prepared": records}
                row |= run_variant(name, code, data_dir, segment, logs, args.under_load)
                print(json.dumps(row), flush=True)
                results.append(row)
            shutil.rmtree(data_dir)
    print()
    print(
        f"{'segment':>8} {'fill':>5} {'variant':>7} {'prepared':>9} {'rescanned':>9} "
        f"{'crash s':>8} {'clean s':>8} {'ratio':>6} {'bg check s':>10}"
    )
    for row in results:
        background = row["background_check_s"]
        print(
            f"{row['segment']:>8} {row['fill']:>5} {row['variant']:>7} {row['prepared']:>9} "
            f"{row['rescanned']:>9} {row['crash_restart_s']:>8.2f} {row['clean_start_s']:>8.2f} "
            f"{row['ratio']:>6.2f} {'-' if background is None else f'{background:.2f}':>10}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
