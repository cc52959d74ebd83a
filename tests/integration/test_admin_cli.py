"""The ``skiff`` client commands against a real broker process, as a user runs them.

One broker serves the module; each test uses its own topics and groups.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import pty
import re
import subprocess
import time

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import SKIFF, BrokerProcess, broker_env, running_broker

from skiff_broker import __version__
from skiff_broker.store.hashing import java_string_hash

# Generous: a cold interpreter per command on a busy machine.
COMMAND_TIMEOUT_S = 120
MESSAGE_ID = re.compile(r"^01[0-9A-F]{32}$")


broker = module_broker("admin-cli")


def run(
    *args: str, input: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SKIFF, *args],
        input=input,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=broker_env({"PYTHONIOENCODING": "utf-8", **(env or {})}),
        timeout=COMMAND_TIMEOUT_S,
    )


def skiff(broker: BrokerProcess, *args: str, input: str | None = None):
    """``skiff ARGS --endpoint <broker>``."""
    return run(*args, "--endpoint", broker.endpoint, input=input)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
    return result.stdout


def json_out(result: subprocess.CompletedProcess[str]):
    return json.loads(ok(result))


def json_lines(result: subprocess.CompletedProcess[str]) -> list[dict]:
    return [json.loads(line) for line in ok(result).splitlines()]


def failed(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert result.returncode == code, f"exit {result.returncode}: {result.stdout}{result.stderr}"
    return result.stderr


def sent_ids(broker: BrokerProcess, topic: str, *args: str) -> list[dict]:
    return json_lines(skiff(broker, "send", "--topic", topic, "--json", *args))


def consumed(broker: BrokerProcess, group: str, topic: str, *args: str) -> list[dict]:
    return json_lines(skiff(broker, "consume", "--group", group, "--topic", topic, "--json", *args))


# -- topics ---------------------------------------------------------------------


def test_topic_create_list_get_update_delete(broker):
    created = run(
        "topic", "create", "cli-orders", "--read-queues", "4", "--write-queues", "4",
        "--endpoint", broker.endpoint,
    )  # fmt: skip
    assert ok(created).strip() == (
        "created topic cli-orders: 4 read / 4 write queues, perm rw, type NORMAL"
    )
    audit = json_out(
        skiff(broker, "topic", "create", "cli-audit", "--read-queues", "2", "--perm", "r",
              "--type", "fifo", "--json")
    )  # fmt: skip
    assert audit == {
        "name": "cli-audit", "read_queues": 2, "write_queues": 2, "perm": "r", "type": "FIFO",
    }  # fmt: skip

    listing = ok(skiff(broker, "topic", "list")).splitlines()
    header = listing[0]
    assert header.split() == ["NAME", "READ", "WRITE", "PERM", "TYPE"]
    orders = next(line for line in listing if line.startswith("cli-orders "))
    # Counts are right-aligned under their headers, text columns start under theirs.
    assert orders[header.index("READ") + len("READ") - 1] == "4"
    assert orders[header.index("PERM") :].split() == ["rw", "NORMAL"]
    topics = {t["name"]: t for t in json_out(skiff(broker, "topic", "list", "--json"))}
    assert topics["cli-audit"] == audit
    assert topics["cli-orders"]["read_queues"] == 4

    assert json_out(skiff(broker, "topic", "get", "cli-orders", "--json"))["perm"] == "rw"
    updated = ok(skiff(broker, "topic", "update", "cli-orders", "--perm", "w"))
    assert (
        updated.strip() == "updated topic cli-orders: 4 read / 4 write queues, perm w, type NORMAL"
    )
    shown = ok(skiff(broker, "topic", "get", "cli-orders")).splitlines()
    assert shown[1].split() == ["cli-orders", "4", "4", "w", "NORMAL"]

    assert ok(skiff(broker, "topic", "delete", "cli-audit")).strip() == "deleted topic cli-audit"
    assert "cli-audit" not in {
        t["name"] for t in json_out(skiff(broker, "topic", "list", "--json"))
    }
    assert "topic 'cli-audit' does not exist" in failed(skiff(broker, "topic", "get", "cli-audit"))
    error = json.loads(failed(skiff(broker, "topic", "get", "cli-audit", "--json")))
    assert error["error"] == "NOT_FOUND"
    assert "does not exist" in error["message"]


def test_endpoint_comes_from_the_environment(broker):
    topics = json.loads(ok(run("topic", "list", "--json", env={"SKIFF_ENDPOINT": broker.endpoint})))
    assert isinstance(topics, list)


def test_an_unreachable_broker_is_reported(tmp_path):
    with running_broker(tmp_path) as gone:
        endpoint = gone.endpoint
    stderr = failed(run("topic", "list", "--endpoint", endpoint))
    assert f"cannot reach a broker at {endpoint}" in stderr


def test_refused_requests_exit_1_with_the_reason(broker):
    ok(skiff(broker, "topic", "create", "cli-dup", "--read-queues", "2"))
    assert "already exists" in failed(skiff(broker, "topic", "create", "cli-dup"))
    error = json.loads(failed(skiff(broker, "topic", "create", "cli-dup", "--json")))
    assert error["error"] == "ALREADY_EXISTS"

    stderr = failed(
        skiff(
            broker, "topic", "create", "cli-lopsided", "--read-queues", "2", "--write-queues", "4"
        )
    )
    assert "messages written to queues 2-3 would never be read" in stderr
    stderr = failed(skiff(broker, "topic", "update", "cli-dup", "--write-queues", "3"))
    assert "Set the read queues to at least 3" in stderr
    assert json_out(skiff(broker, "topic", "get", "cli-dup", "--json"))["write_queues"] == 2


@pytest.mark.parametrize(
    "args",
    [
        ["topic", "create"],
        ["topic", "create", "t", "--read-queues", "0"],
        ["topic", "create", "t", "--perm", "x"],
        ["topic", "create", "t", "--endpoint", "no-port"],
        ["topic", "update", "t"],
        ["send", "--body", "x"],
        ["send", "--topic", "t", "--property", "novalue", "--body", "x"],
        ["send", "--topic", "t", "--body", "x", "--body-file", __file__],
        ["send", "--topic", "t", "--message-group", "g", "--delay-seconds", "5", "--body", "x"],
        ["consume", "--topic", "t", "--peek", "--group", "g"],
        ["consume", "--topic", "t", "--from", "yesterday"],
        ["group", "reset", "g", "--topic", "t"],
        ["group", "reset", "g", "--topic", "t", "--to-earliest", "--to-latest"],
        ["admin", "offset-by-time", "--topic", "t", "--time", "yesterday"],
    ],
)
def test_usage_errors_exit_2(broker, args):
    failed(run(*args, *([] if "--endpoint" in args else ["--endpoint", broker.endpoint])), 2)


def test_unsafe_read_queue_shrink_is_refused_until_the_messages_are_consumed(broker):
    topic = "cli-shrink"
    ok(skiff(broker, "topic", "create", topic, "--read-queues", "4", "--type", "FIFO"))
    # A message group always lands in one queue; pick one that lands in queue 3.
    group = next(f"g{i}" for i in range(1000) if abs(java_string_hash(f"g{i}")) % 4 == 3)
    for i in range(3):
        sent_ids(broker, topic, "--body", f"fifo-{i}", "--message-group", group)
    queues = json_out(skiff(broker, "admin", "offsets", "--topic", topic, "--json"))["queues"]
    assert [q["max_offset"] for q in queues] == [0, 0, 0, 3]

    # Lowering the write queues first is always safe.
    ok(skiff(broker, "topic", "update", topic, "--write-queues", "2"))
    stderr = failed(skiff(broker, "topic", "update", topic, "--read-queues", "2"))
    assert "cannot shrink the read queues of 'cli-shrink' from 4 to 2" in stderr
    assert "queue 3 holds 3 messages" in stderr
    assert "queue 2" not in stderr
    assert json_out(skiff(broker, "topic", "get", topic, "--json"))["read_queues"] == 4

    messages = consumed(broker, "shrink-readers", topic, "--count", "3")
    assert [m["body"] for m in messages] == ["fifo-0", "fifo-1", "fifo-2"]
    assert {m["message_group"] for m in messages} == {group}

    shrunk = ok(skiff(broker, "topic", "update", topic, "--read-queues", "2"))
    assert shrunk.strip() == f"updated topic {topic}: 2 read / 2 write queues, perm rw, type FIFO"
    assert json_out(skiff(broker, "topic", "get", topic, "--json"))["read_queues"] == 2


# -- sending and consuming -------------------------------------------------------


def test_send_and_consume_round_trip(broker, tmp_path):
    topic = "cli-round-trip"
    ok(skiff(broker, "topic", "create", topic, "--read-queues", "2"))
    [first] = sent_ids(
        broker, topic, "--body", "hello wörld", "--tag", "paid", "--key", "order-1",
        "--key", "order-1b", "--property", "region=eu", "--property", "tier=gold",
    )  # fmt: skip
    assert MESSAGE_ID.match(first["message_id"])
    bulk = ok(
        skiff(broker, "send", "--topic", topic, "--body", "bulk", "--tag", "other", "--count", "3")
    )
    assert bulk.strip() == f"sent 3 messages to {topic}"
    lines = ok(skiff(broker, "send", "--topic", topic, input="line-1\nline-2\n\nline-3\n"))
    assert lines.strip() == f"sent 3 messages to {topic}"
    binary = bytes(range(256))
    (tmp_path / "body.bin").write_bytes(binary)
    ok(skiff(broker, "send", "--topic", topic, "--body-file", str(tmp_path / "body.bin")))

    [paid] = consumed(broker, "rt-paid", topic, "--tag-filter", "paid", "--count", "1")
    assert paid["message_id"] == first["message_id"]
    assert paid["body"] == "hello wörld"
    assert paid["body_encoding"] == "utf-8"
    assert paid["tag"] == "paid"
    assert paid["keys"] == ["order-1", "order-1b"]
    assert paid["properties"] == {"region": "eu", "tier": "gold"}
    assert paid["delivery_attempt"] == 1

    everything = consumed(broker, "rt-all", topic, "--count", "8")
    texts = sorted(m["body"] for m in everything if m["body_encoding"] == "utf-8")
    assert texts == ["bulk", "bulk", "bulk", "hello wörld", "line-1", "line-2", "line-3"]
    [raw] = [m for m in everything if m["body_encoding"] == "base64"]
    assert base64.b64decode(raw["body"]) == binary
    assert len({m["message_id"] for m in everything}) == 8

    # Consumed messages were acknowledged: the group gets nothing more.
    again = skiff(broker, "consume", "--group", "rt-all", "--topic", topic, "--wait", "1")
    assert ok(again) == ""
    assert f"consumed 0 messages of {topic} for group rt-all" in again.stderr

    shown = ok(skiff(broker, "consume", "--group", "rt-human", "--topic", topic,
                     "--tag-filter", "paid", "--count", "1"))  # fmt: skip
    header, body = shown.splitlines()
    assert header.startswith(f"[{topic} ") and first["message_id"] in header
    assert "tag paid" in header and "keys order-1 order-1b" in header
    assert "region=eu tier=gold" in header
    assert body == "hello wörld"


def test_long_sends_show_progress_on_a_terminal(broker):
    ok(skiff(broker, "topic", "create", "cli-progress", "--read-queues", "1"))
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.run(
            [*SKIFF, "send", "--topic", "cli-progress", "--body", "x", "--count", "200",
             "--endpoint", broker.endpoint],
            stdout=subprocess.PIPE,
            stderr=terminal,
            env=broker_env(),
            timeout=COMMAND_TIMEOUT_S,
        )  # fmt: skip
        os.close(terminal)
        shown = b""
        while chunk := _read_pty(controller):
            shown += chunk
    finally:
        os.close(controller)
    assert proc.returncode == 0
    assert proc.stdout.decode().strip() == "sent 200 messages to cli-progress"
    assert "200/200" in shown.decode()


def _read_pty(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the writing side is closed and everything was read
        return b""


# -- admin -----------------------------------------------------------------------


def test_broker_info(broker):
    before = json_out(skiff(broker, "admin", "info", "--json"))
    assert before["role"] == "MASTER"
    assert before["endpoint"] == broker.endpoint
    # Where 4.x clients and the other groups' routes reach it.
    assert before["remoting_endpoint"] == broker.remoting_endpoint
    assert before["version"] == __version__
    assert before["flush_type"] == "ASYNC_FLUSH"
    assert before["transient_store_pool"] is False
    assert before["writable"] is True and before["refusal"] == ""
    assert 0 <= before["disk_use_ratio"] <= 1

    ok(skiff(broker, "topic", "create", "cli-info", "--read-queues", "1"))
    sent_ids(broker, "cli-info", "--body", "grow")
    after = json_out(skiff(broker, "admin", "info", "--json"))
    assert after["commit_log_max_offset"] > before["commit_log_max_offset"]
    human = ok(skiff(broker, "admin", "info"))
    assert re.search(r"^role\s+MASTER$", human, re.M)
    assert re.search(rf"^endpoint\s+{re.escape(broker.endpoint)}$", human, re.M)
    assert re.search(rf"^remoting endpoint\s+{re.escape(broker.remoting_endpoint)}$", human, re.M)


def test_queue_offsets_and_consumer_lag(broker):
    topic = "cli-lag"
    ok(skiff(broker, "topic", "create", topic, "--read-queues", "2"))
    ok(skiff(broker, "send", "--topic", topic, "--body", "x", "--count", "5"))
    queues = json_out(skiff(broker, "admin", "offsets", "--topic", topic, "--json"))["queues"]
    assert [q["queue_id"] for q in queues] == [0, 1]
    assert sorted(q["max_offset"] for q in queues) == [2, 3]  # round-robin over 2 queues
    assert all(q["min_offset"] == 0 for q in queues)
    table = ok(skiff(broker, "admin", "offsets", "--topic", topic)).splitlines()
    assert table[0].split() == ["QUEUE", "MIN", "OFFSET", "MAX", "OFFSET", "MESSAGES"]

    assert len(consumed(broker, "lagging", topic, "--count", "2")) == 2
    lag = json_out(skiff(broker, "admin", "lag", "--group", "lagging", "--topic", topic, "--json"))
    assert lag["total_lag"] == 3
    maxima = {q["queue_id"]: q["max_offset"] for q in queues}
    assert {q["queue_id"]: q["broker_offset"] for q in lag["queues"]} == maxima
    assert sum(q["consumer_offset"] for q in lag["queues"]) == 2
    assert all(q["lag"] == q["broker_offset"] - q["consumer_offset"] for q in lag["queues"])
    human = ok(skiff(broker, "admin", "lag", "--group", "lagging", "--topic", topic))
    assert f"total lag of group lagging on {topic}: 3" in human

    stderr = failed(skiff(broker, "admin", "lag", "--group", "nobody", "--topic", topic))
    assert "consumer group 'nobody' has not consumed from topic 'cli-lag'" in stderr


def test_lookup_by_message_id_and_by_key(broker):
    topic = "cli-lookup"
    ok(skiff(broker, "topic", "create", topic, "--read-queues", "2"))
    [target] = sent_ids(broker, topic, "--body", "find-me", "--key", "k-find", "--tag", "t1")
    sent_ids(broker, topic, "--body", "a1", "--key", "shared")
    sent_ids(broker, topic, "--body", "a2", "--key", "shared")

    found = json_out(
        skiff(broker, "admin", "lookup", "--topic", topic, target["message_id"], "--json")
    )
    assert found["message_id"] == target["message_id"]
    assert found["body"] == "find-me"
    assert found["keys"] == ["k-find"]
    assert found["tag"] == "t1"
    assert found["queue_offset"] == target["offset"]
    shown = ok(skiff(broker, "admin", "lookup", "--topic", topic, target["message_id"]))
    assert re.search(r"^body\s+find-me$", shown, re.M)

    by_key = json_out(skiff(broker, "admin", "query-key", "--topic", topic, "shared", "--json"))
    assert sorted(m["body"] for m in by_key) == ["a1", "a2"]
    assert json_out(skiff(broker, "admin", "query-key", "--topic", topic, "absent", "--json")) == []

    missing = "01" + "0" * 32
    stderr = failed(skiff(broker, "admin", "lookup", "--topic", topic, missing))
    assert f"no message with ID {missing} in topic '{topic}'" in stderr


def test_offset_by_time(broker):
    topic = "cli-time"
    ok(skiff(broker, "topic", "create", topic, "--read-queues", "1"))
    early = sent_ids(broker, topic, "--body", "early", "--count", "2")
    stored_early = max(_stored_at(broker, topic, m["message_id"]) for m in early)
    # The next message must be stored in a later millisecond than the early ones.
    deadline = time.monotonic() + 30
    while time.time() * 1000 <= stored_early + 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    [late] = sent_ids(broker, topic, "--body", "late")
    stored_late = _stored_at(broker, topic, late["message_id"])
    assert stored_late > stored_early

    def offset_at(at: str) -> int:
        result = json_out(
            skiff(broker, "admin", "offset-by-time", "--topic", topic, "--queue", "0",
                  "--time", at, "--json")
        )  # fmt: skip
        return result["queues"][0]["offset"]

    assert offset_at("0") == 0
    assert offset_at(str(stored_late)) == 2
    iso = datetime.datetime.fromtimestamp(stored_late / 1000, tz=datetime.UTC).isoformat()
    assert offset_at(iso) == 2
    assert offset_at(str(stored_late + 1)) == 3  # nothing later: the queue's end
    table = ok(
        skiff(broker, "admin", "offset-by-time", "--topic", topic, "--time", str(stored_late))
    )
    assert table.splitlines()[-1].split() == ["0", "2"]


def _stored_at(broker: BrokerProcess, topic: str, message_id: str) -> int:
    found = json_out(skiff(broker, "admin", "lookup", "--topic", topic, message_id, "--json"))
    return found["store_timestamp"]


def test_unknown_topics_are_reported_as_not_found(broker):
    for args in (
        ["admin", "offsets", "--topic", "cli-nope"],
        ["admin", "lag", "--group", "g", "--topic", "cli-nope"],
        ["admin", "lookup", "--topic", "cli-nope", "01" + "0" * 32],
        ["admin", "query-key", "--topic", "cli-nope", "k"],
        ["admin", "offset-by-time", "--topic", "cli-nope", "--time", "0"],
        ["topic", "update", "cli-nope", "--perm", "r"],
        ["topic", "delete", "cli-nope"],
        ["send", "--topic", "cli-nope", "--body", "x"],
        ["consume", "--group", "g", "--topic", "cli-nope", "--wait", "1"],
    ):
        assert "topic 'cli-nope' does not exist" in failed(skiff(broker, *args)), args
    # The broker keeps serving after all those errors.
    ok(skiff(broker, "topic", "list"))


def test_a_deleted_topic_starts_afresh_when_created_again(broker):
    topic = "cli-delete"
    ok(skiff(broker, "topic", "create", topic, "--read-queues", "1"))
    ok(skiff(broker, "send", "--topic", topic, "--body", "old", "--count", "2"))
    assert len(consumed(broker, "returning", topic, "--count", "2")) == 2
    queue_dir = broker.data_dir / "consumequeue" / topic
    assert queue_dir.is_dir()

    ok(skiff(broker, "topic", "delete", topic))
    assert not queue_dir.exists()

    ok(skiff(broker, "topic", "create", topic, "--read-queues", "1"))
    ok(skiff(broker, "send", "--topic", topic, "--body", "new"))
    queues = json_out(skiff(broker, "admin", "offsets", "--topic", topic, "--json"))["queues"]
    assert queues == [{"queue_id": 0, "min_offset": 0, "max_offset": 1}]
    [message] = consumed(broker, "returning", topic, "--count", "1")
    assert message["body"] == "new"
    assert message["queue_offset"] == 0


def test_group_tools_show_lag_reset_and_delete(broker):
    topic = "cli-groups"
    ok(skiff(broker, "topic", "create", topic, "--read-queues", "2"))
    ok(skiff(broker, "send", "--topic", topic, input="a\nb\nc\nd\ne\n"))
    assert len(consumed(broker, "cli-readers", topic, "--count", "3")) == 3

    [listed] = [
        g for g in json_out(skiff(broker, "group", "list", "--json")) if g["group"] == "cli-readers"
    ]
    assert (listed["topics"], listed["total_lag"], listed["live_consumers"]) == ([topic], 2, 0)
    table = ok(skiff(broker, "group", "list", "--topic", topic))
    assert table.splitlines()[0].split() == ["GROUP", "TOPICS", "LIVE", "LAG"]
    assert table.splitlines()[1].split() == ["cli-readers", topic, "0", "2"]
    described = json_out(skiff(broker, "group", "describe", "cli-readers", "--json"))
    assert described["topics"][0]["total_lag"] == 2
    assert "no live consumers" in ok(skiff(broker, "group", "describe", "cli-readers"))

    preview = ok(
        skiff(
            broker, "group", "reset", "cli-readers", "--topic", topic, "--to-earliest", "--dry-run"
        )
    )
    assert "dry run: nothing changed" in preview
    assert (
        json_out(skiff(broker, "group", "describe", "cli-readers", "--json"))["topics"][0][
            "total_lag"
        ]
        == 2
    )
    reset = json_out(
        skiff(broker, "group", "reset", "cli-readers", "--topic", topic, "--to-earliest", "--json")
    )
    assert reset["applied"] is True
    assert {q["new_offset"] for q in reset["queues"]} == {0}
    again = consumed(broker, "cli-readers", topic)
    assert sorted(m["body"] for m in again) == ["a", "b", "c", "d", "e"]

    deleted = ok(skiff(broker, "group", "delete", "cli-readers"))
    assert f"deleted group cli-readers (it had offsets on {topic})" in deleted
    assert "cli-readers" not in {
        g["group"] for g in json_out(skiff(broker, "group", "list", "--json"))
    }
    assert "nothing to delete" in failed(skiff(broker, "group", "delete", "cli-readers"))


def test_peek_and_throwaway_consumes_leave_no_group_behind(broker):
    topic = "cli-peek"
    ok(skiff(broker, "topic", "create", topic, "--read-queues", "2"))
    ok(skiff(broker, "send", "--topic", topic, input="one\ntwo\nthree\n"))
    assert len(consumed(broker, "cli-keepers", topic, "--count", "1")) == 1
    before = json_out(skiff(broker, "group", "describe", "cli-keepers", "--json"))

    peeked = json_lines(
        skiff(broker, "consume", "--topic", topic, "--peek", "--wait", "1", "--json")
    )
    assert sorted(m["body"] for m in peeked) == ["one", "three", "two"]
    # Peeking again sees the same messages: nothing was acknowledged.
    again = skiff(broker, "consume", "--topic", topic, "--peek", "--wait", "1", "--count", "3")
    assert "peeked at 3 messages" in again.stderr
    assert json_out(skiff(broker, "group", "describe", "cli-keepers", "--json")) == before
    latest = skiff(broker, "consume", "--topic", topic, "--peek", "--from", "latest", "--wait", "1")
    assert "peeked at 0 messages" in latest.stderr

    throwaway = skiff(
        broker, "consume", "--topic", topic, "--from-beginning", "--wait", "1", "--json"
    )
    assert sorted(json.loads(line)["body"] for line in ok(throwaway).splitlines()) == [
        "one",
        "three",
        "two",
    ]
    assert "(throwaway, deleted)" in throwaway.stderr
    groups = {g["group"] for g in json_out(skiff(broker, "group", "list", "--json"))}
    assert not any(g.startswith("skiff-consume-") for g in groups)
    assert groups >= {"cli-keepers"}

    # --from with a group moves the group first.
    rest = consumed(broker, "cli-keepers", topic, "--from", "earliest", "--wait", "1")
    assert len(rest) == 3


def test_group_reset_with_live_consumers_says_to_stop_them_or_force(broker):
    topic = "cli-live"
    ok(skiff(broker, "topic", "create", topic, "--read-queues", "1"))
    with grpc.insecure_channel(broker.endpoint) as channel:
        reply = service_pb2_grpc.MessagingServiceStub(channel).Heartbeat(
            spb.HeartbeatRequest(
                group=pb.Resource(name="cli-live-readers"),
                client_type=pb.ClientType.PUSH_CONSUMER,
            ),
            metadata=[("x-mq-client-id", "cli-live-consumer")],
            timeout=30,
        )
    assert reply.status.code == pb.Code.OK
    reset = ("group", "reset", "cli-live-readers", "--topic", topic, "--to-latest")
    refused = failed(skiff(broker, *reset))
    assert "1 live consumer(s) (cli-live-consumer)" in refused
    assert "'skiff group reset --force'" in refused
    assert "reset group cli-live-readers" in ok(skiff(broker, *reset, "--force"))
    assert "PUSH_CONSUMER" in ok(skiff(broker, "group", "describe", "cli-live-readers"))
