"""What a newcomer sees from the CLI, against real broker processes: a replica's ready
line offers what a replica does, ``skiff store check`` says when a broker is running on
the directory it reads, ``skiff send --json`` names each message's queue, and a consume
that never reached a broker warns of no group to clean up."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from tests.support.broker_process import (
    COMMIT_LOG_FILE_SIZE,
    BrokerProcess,
    broker_env,
    create_topics,
    data_dir_of,
    running_broker,
    start_broker,
)

from skiff_broker.client.messaging import MessagingClient
from skiff_broker.metadata.topic_table import TopicConfig

SKIFF = [sys.executable, "-m", "skiff_broker"]
TOPIC = "newcomer"


def skiff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SKIFF, *args], env=broker_env(), capture_output=True, text=True, timeout=120
    )


def ready_line(broker: BrokerProcess) -> str:
    (line,) = [r["msg"] for r in broker.log_lines() if r.get("msg", "").startswith("ready")]
    return line


def test_a_replica_says_it_is_one_and_offers_what_works_on_it(tmp_path: Path) -> None:
    create_topics(data_dir_of(tmp_path / "master"), TopicConfig(TOPIC, 1, 1))
    with running_broker(tmp_path / "master", "--role", "MASTER") as master:
        (tmp_path / "replica").mkdir()
        replica = start_broker(
            tmp_path / "replica", "--role", "REPLICA", "--master-address", master.ha_endpoint
        )
        try:
            line = ready_line(replica)
            assert line.startswith(f"ready as a replica of {master.ha_endpoint} ")
            assert "create topics and send there" in line
            assert "topic create" not in line
            suggested = f"skiff topic list --endpoint {replica.endpoint}"
            assert line.endswith(f"try: {suggested}")
            # What it suggests works there; what a master suggests does not.
            assert skiff(*suggested.split()[1:]).returncode == 0
            refused = skiff("topic", "create", "demo", "--endpoint", replica.endpoint)
            assert refused.returncode != 0 and "replica" in refused.stderr
        finally:
            replica.stop()
        assert "try: skiff topic create demo" in ready_line(master)


def test_store_check_says_when_a_running_broker_holds_the_directory(tmp_path: Path) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 1, 1))
    check = ("store", "check", "--commit-log-file-size", COMMIT_LOG_FILE_SIZE, "--data-dir")
    with running_broker(tmp_path) as broker:
        data_dir = str(broker.data_dir)
        live = skiff(*check, data_dir)
        live_json = json.loads(skiff(*check, data_dir, "--json").stdout)
    first = live.stdout.splitlines()[0]
    assert first.startswith("note: a running broker holds this directory (its lock file)")
    assert "writes in flight" in first and "Stop the broker for an exact check" in first
    assert live_json["live"] is True
    stopped = skiff(*check, data_dir)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "running broker" not in stopped.stdout
    assert json.loads(skiff(*check, data_dir, "--json").stdout)["live"] is False


def test_send_json_names_the_queue_each_message_is_in(tmp_path: Path) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 4, 4))
    with running_broker(tmp_path) as broker:
        sent = skiff(
            "send", "--topic", TOPIC, "--body", "hello", "--count", "12", "--json",
            "--endpoint", broker.endpoint,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        lines = [json.loads(line) for line in sent.stdout.splitlines()]
        with MessagingClient(broker.endpoint) as client:
            received = client.receive("newcomer-check", TOPIC, max_messages=32, wait_s=10)
    where = {m.message_id: (m.queue_id, m.queue_offset) for m in received}
    assert len(lines) == 12 == len(where)
    for line in lines:
        assert set(line) == {"topic", "message_id", "queue_id", "offset"}
        assert (line["queue_id"], line["offset"]) == where[line["message_id"]]
    # The broker spreads one-message sends over its write queues: the ids say which.
    assert len({line["queue_id"] for line in lines}) > 1


def test_a_consume_that_never_reached_a_broker_warns_of_no_group(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{closed.getsockname()[1]}"
    done = skiff("consume", "--topic", TOPIC, "--count", "1", "--wait", "1", "--endpoint", endpoint)
    assert done.returncode == 1
    assert "cannot reach a broker at" in done.stderr
    assert "throwaway group" not in done.stderr, done.stderr
