"""The unmodified RocketMQ Go client v2 (rocketmq-client-go/v2, remoting protocol) against Skiff.

As with the 4.x Java client, the Go client's name server is the broker's remoting port and
nothing else changes. Each test runs one scenario of ``go_remoting/main.go`` (built once
and cached; its own log goes to a file in the test's folder) against a real broker. Without
Go the tests skip, saying what to install; with SKIFF_REQUIRE_K8S set (CI) they fail.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials
from tests.official_clients import (
    RUN_TIMEOUT_S,
    GoRemotingClient,
    Outcome,
    built_or_skipped,
    go_remoting_client,
    run_client,
)
from tests.support.broker_process import (
    BrokerProcess,
    create_topics,
    data_dir_of,
    running_broker,
)
from tests.support.official_client import receive_all, started_simple_consumer

from skiff_broker.client.admin import AclEntry, AdminClient
from skiff_broker.client.credentials import Credentials as SkiffCredentials
from skiff_broker.metadata.topic_table import TopicConfig

MESSAGES = 4
KINDS = ("sync", "async", "oneway", "batch")


@pytest.fixture(scope="session")
def go_remoting() -> GoRemotingClient:
    return built_or_skipped(go_remoting_client)


def run_scenario(
    go_remoting: GoRemotingClient,
    broker: BrokerProcess,
    logs: Path,
    scenario: str,
    timeout_s: float = RUN_TIMEOUT_S,
    **options: object,
) -> Outcome:
    """Run ``scenario`` with the broker's remoting port as its name server; it must succeed."""
    outcome = run_client(
        go_remoting.command(scenario, logs, namesrv=broker.remoting_endpoint, **options),
        logs,
        timeout_s=timeout_s,
    )
    assert outcome.errors == [] and outcome.returncode == 0, (
        outcome.errors,
        outcome.stderr[-3000:],
    )
    return outcome


def test_go_sends_of_every_kind_reach_tag_and_sql92_push_consumers(
    tmp_path: Path, go_remoting: GoRemotingClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("orders", 2, 2))
    with running_broker(tmp_path) as broker:
        outcome = run_scenario(
            go_remoting,
            broker,
            tmp_path / "logs",
            "produce-consume",
            topic="orders",
            group="order-readers",
            count=MESSAGES,
        )
    sent = outcome.summary["sent"]
    assert sorted(s["kind"] for s in sent) == sorted(KINDS * MESSAGES)
    for entry in sent:
        if entry["kind"] in ("sync", "async"):
            assert entry["status"] == "SEND_OK"
            # RocketMQ's offset message ID: store host (8 bytes) and log offset (8 bytes).
            assert len(entry["offsetMsgId"]) == 32 and entry["offsetMsgId"] != entry["msgId"]
    assert outcome.summary["batchResult"]["status"] == "SEND_OK"
    received = outcome.summary["received"]
    tagged = [r["message"] for r in received if r["consumer"] == "tagged"]
    # Every TagA message once, whatever kind sent it, and no TagB.
    assert sorted(m["body"] for m in tagged) == sorted(
        s["body"] for s in sent if s["tag"] == "TagA"
    )
    assert {m["tag"] for m in tagged} == {"TagA"}
    ids = {s["body"]: s["msgId"] for s in sent if s["kind"] != "batch"}
    for message in tagged:
        assert message["topic"] == "orders"
        assert message["properties"]["origin"] == "remoting-go"
        assert message["keys"] == f"k{message['properties']['idx']}"
        if message["body"] in ids:
            assert message["msgId"] == ids[message["body"]]
    sync_sent = {s["msgId"]: s for s in sent if s["kind"] == "sync"}
    for message in tagged:
        if message["msgId"] in sync_sent:
            assert message["queueId"] == sync_sent[message["msgId"]]["queueId"]
            assert message["queueOffset"] == sync_sent[message["msgId"]]["queueOffset"]
    # SQL92 over a user property, filtered by the broker.
    selected = [r["message"] for r in received if r["consumer"] == "sql"]
    assert sorted(m["body"] for m in selected) == sorted(s["body"] for s in sent if s["idx"] >= 1)


def test_go_clustering_consumers_rebalance_as_one_joins_and_one_leaves(
    tmp_path: Path, go_remoting: GoRemotingClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("shared", 4, 4))
    count = 8
    with running_broker(tmp_path) as broker:
        outcome = run_scenario(
            go_remoting, broker, tmp_path / "logs", "rebalance",
            topic="shared", group="sharers", count=count,
        )  # fmt: skip
    sent = defaultdict(set)
    for entry in outcome.summary["sent"]:
        sent[entry["kind"]].add(entry["msgId"])
    received = outcome.summary["received"]
    first: dict[str, dict] = {}
    for entry in received:
        first.setdefault(entry["message"]["msgId"], entry)
    # Phase 1: a and b; 2: from c's joining; 3: from b's leaving. Every message arrives
    # (nothing lost) in the phase it was sent, and every member then gets some. At least
    # once, as in RocketMQ: a message whose queue moved (or whose consumer left) before
    # its offset was committed may come again, to a member of that later phase.
    for phase, kind, members in ((1, "shared", "ab"), (2, "joined", "abc"), (3, "left", "ac")):
        stamped = [e for e in received if e["phase"] == phase]
        assert {e["consumer"] for e in stamped} <= set(members), phase
        assert {first[m]["phase"] for m in sent[kind]} == {phase}, phase
        assert {first[m]["consumer"] for m in sent[kind]} == set(members), phase
    assert set(first) == set().union(*sent.values())


def test_go_broadcasting_consumers_each_get_every_message(
    tmp_path: Path, go_remoting: GoRemotingClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("news", 2, 2))
    with running_broker(tmp_path) as broker:
        outcome = run_scenario(
            go_remoting, broker, tmp_path / "logs", "broadcast",
            topic="news", group="listeners", count=MESSAGES,
        )  # fmt: skip
    sent = sorted(s["msgId"] for s in outcome.summary["sent"])
    assert len(sent) == MESSAGES
    for name in ("x", "y"):
        got = [r["message"]["msgId"] for r in outcome.summary["received"] if r["consumer"] == name]
        assert sorted(got) == sent, name


def test_go_orderly_consumers_each_consume_whole_queues_in_order(
    tmp_path: Path, go_remoting: GoRemotingClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("ledger", 4, 4))
    per_queue = 5
    with running_broker(tmp_path) as broker:
        # The Go client does not unlock a queue rebalancing takes from it: b gets its
        # queues once a's locks expire (60 s, as in RocketMQ), so this scenario waits long.
        outcome = run_scenario(
            go_remoting, broker, tmp_path / "logs", "orderly",
            topic="ledger", group="bookkeepers", count=per_queue, deadline="150s",
            timeout_s=240,
        )  # fmt: skip
    by_queue: dict[int, list[dict]] = defaultdict(list)
    for entry in outcome.summary["received"]:
        by_queue[entry["message"]["queueId"]].append(entry)
    assert sorted(by_queue) == [0, 1, 2, 3]
    for queue_id, entries in by_queue.items():
        assert [e["message"]["body"] for e in entries] == [
            f"q{queue_id}-{i}" for i in range(per_queue)
        ]
        assert len({e["consumer"] for e in entries}) == 1
    assert {e["consumer"] for e in outcome.summary["received"]} == {"a", "b"}


def test_go_consumer_failures_come_back_from_the_retry_topic_then_land_in_the_dlq(
    tmp_path: Path, go_remoting: GoRemotingClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("payments", 2, 2))
    group = "payers"
    with running_broker(tmp_path) as broker:
        outcome = run_scenario(
            go_remoting, broker, tmp_path / "logs", "retry",
            topic="payments", group=group, count=MESSAGES,
        )  # fmt: skip
        config = ClientConfiguration(broker.endpoint, Credentials())
        with started_simple_consumer(config, "dlq-readers", f"%DLQ%{group}") as dlq:
            dead = receive_all(dlq, MESSAGES)
    sent = {s["msgId"]: s for s in outcome.summary["sent"]}
    deliveries: dict[str, list[dict]] = defaultdict(list)
    for entry in outcome.summary["received"]:
        deliveries[entry["message"]["msgId"]].append(entry)
    assert set(deliveries) == set(sent)
    for message_id, attempts in deliveries.items():
        # The first delivery and the two retries maxReconsumeTimes allows, no more.
        assert [a["reconsumeTimes"] for a in attempts] == [0, 1, 2]
        for attempt in attempts:
            assert attempt["message"]["topic"] == "payments"
            assert attempt["message"]["body"] == sent[message_id]["body"]
        for retried in attempts[1:]:
            assert retried["message"]["properties"]["RETRY_TOPIC"] == "payments"
    assert {m.message_id for m in dead} == set(sent)
    for message in dead:
        assert message.body.decode() == sent[message.message_id]["body"]
        assert message.properties["origin"] == "remoting-go"


def test_go_delayed_messages_arrive_no_sooner_than_their_level_says(
    tmp_path: Path, go_remoting: GoRemotingClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("later", 2, 2))
    with running_broker(tmp_path) as broker:
        outcome = run_scenario(
            go_remoting, broker, tmp_path / "logs", "delay",
            topic="later", group="waiters", count=MESSAGES,
        )  # fmt: skip
    sent = {s["msgId"]: s for s in outcome.summary["sent"]}
    received = {r["message"]["msgId"]: r["message"] for r in outcome.summary["received"]}
    assert set(received) == set(sent)
    level_seconds = {1: 1, 2: 5}  # RocketMQ's delay levels "1s 5s ..."
    for message_id, entry in sent.items():
        # A lower bound only: a delayed message is never handed out early.
        waited_ms = received[message_id]["receivedAt"] - entry["sentAt"]
        assert waited_ms >= level_seconds[entry["level"]] * 1000, entry
        assert received[message_id]["topic"] == "later"


def test_go_transaction_left_unknown_is_committed_by_the_check_back(
    tmp_path: Path, go_remoting: GoRemotingClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("orders-tx", 2, 2))
    checking = ("--transaction-timeout", "1", "--transaction-check-interval", "0.5")
    with running_broker(tmp_path, *checking) as broker:
        outcome = run_scenario(
            go_remoting, broker, tmp_path / "logs", "transaction",
            topic="orders-tx", group="tx-readers", count=MESSAGES,
        )  # fmt: skip
    sent = {s["msgId"]: s for s in outcome.summary["sent"]}
    assert [s["status"] for s in sent.values()] == ["SEND_OK"] * MESSAGES
    by_idx = {s["idx"]: s for s in sent.values()}
    assert by_idx[0]["localState"] == "COMMIT_MESSAGE"
    assert by_idx[1]["localState"] == "ROLLBACK_MESSAGE"
    entries = outcome.summary["received"]
    checks = [e for e in entries if e["kind"] == "check"]
    unknown = {s["msgId"] for s in sent.values() if s["localState"] == "UNKNOW"}
    assert unknown and unknown <= {c["msgId"] for c in checks}
    for check in checks:
        assert check["topic"] == "orders-tx"
        assert check["body"] == f"tx-{sent[check['msgId']]['idx']}"
    # Committed at once or by the answer to a check: delivered once each (the Go client
    # answers a check naming the message's own ID as the transaction); never the rolled back.
    delivered = [e["message"] for e in entries if e["kind"] == "delivery"]
    assert sorted(m["msgId"] for m in delivered) == sorted(
        m for m in sent if m != by_idx[1]["msgId"]
    )


def test_go_pull_consumer_polls_seeks_back_and_commits_its_offsets(
    tmp_path: Path, go_remoting: GoRemotingClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("pulled", 2, 2))
    with running_broker(tmp_path) as broker:
        outcome = run_scenario(
            go_remoting, broker, tmp_path / "logs", "lite-pull",
            topic="pulled", group="pullers", count=MESSAGES,
        )  # fmt: skip
        with AdminClient(broker.endpoint) as admin:
            lag = admin.consumer_lag("pullers", "pulled")
    sent = sorted(s["msgId"] for s in outcome.summary["sent"])
    for phase in (1, 2):
        got = [r["message"]["msgId"] for r in outcome.summary["received"] if r["phase"] == phase]
        # Phase 2 is after seeking every queue back to 0: the same messages again.
        assert sorted(got) == sent, phase
    # The offsets it committed over remoting are the group's on the gRPC side too.
    assert lag.total_lag == 0
    assert sum(q.consumer_offset for q in lag.queues) == MESSAGES


ROOT = ("root", "root-secret")
ALICE = ("alice", "alice-secret")
AUTH_ENV = {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": ":".join(ROOT)}


def test_go_client_signed_with_credentials_is_served_and_unsigned_ones_are_refused(
    tmp_path: Path, go_remoting: GoRemotingClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("orders", 2, 2), TopicConfig("audit", 1, 1))
    with running_broker(tmp_path, env=AUTH_ENV) as broker:
        with AdminClient(broker.endpoint, credentials=SkiffCredentials(*ROOT)) as admin:
            assert admin.apply_user(*ALICE)
            # She publishes to and reads orders as billing, and may only read audit.
            acl = [
                AclEntry(("Topic:orders", "Group:billing"), ("Pub", "Sub")),
                AclEntry(("Topic:audit",), ("Sub",)),
            ]
            assert admin.apply_acl(ALICE[0], acl)
        outcome = run_scenario(
            go_remoting, broker, tmp_path / "logs", "acl",
            topic="orders", group="billing", count=MESSAGES,
            access_key=ALICE[0], secret_key=ALICE[1], denied_topic="audit",
        )  # fmt: skip
    sent = outcome.summary["sent"]
    assert len(sent) == MESSAGES and {s["status"] for s in sent} == {"SEND_OK"}
    received = [r["message"]["msgId"] for r in outcome.summary["received"]]
    assert sorted(received) == sorted(s["msgId"] for s in sent)
    refusals = {r["case"]: r for r in outcome.summary["refusals"]}
    assert set(refusals) == {"unsigned", "wrong-secret", "denied-topic"}
    for case, refusal in refusals.items():
        # Nothing was stored for any of them: each send ended in an error.
        assert "status" not in refusal and refusal["error"], case
    assert "User:alice has no permission to access Topic:audit" in refusals["denied-topic"]["error"]
    # The client reports the other two as a missing route; its log says why, and how to sign.
    log = (tmp_path / "logs" / "rocketmq-go.log").read_text()
    assert "check signature failed: the signature of access key 'alice' does not match" in log
    assert "username cannot be null" in log and "primitive.Credentials" in log


def test_go_clients_with_tls_and_without_are_served_on_one_port(
    tmp_path: Path, go_remoting: GoRemotingClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("mixed", 2, 2))
    with running_broker(tmp_path) as broker:
        outcome = run_scenario(
            go_remoting, broker, tmp_path / "logs", "tls",
            topic="mixed", group="mixed-readers", count=MESSAGES,
        )  # fmt: skip
    sent = outcome.summary["sent"]
    assert sorted(s["kind"] for s in sent) == ["plain"] * MESSAGES + ["tls"] * MESSAGES
    everything = sorted(s["msgId"] for s in sent)
    for consumer in ("tls", "plain"):
        got = [
            r["message"]["msgId"] for r in outcome.summary["received"] if r["consumer"] == consumer
        ]
        assert sorted(got) == everything, consumer


def test_a_go_remoting_message_is_read_by_the_grpc_client_with_its_id_and_properties(
    tmp_path: Path, go_remoting: GoRemotingClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("bridge", 2, 2))
    with running_broker(tmp_path) as broker:
        outcome = run_scenario(
            go_remoting,
            broker,
            tmp_path / "logs",
            "send",
            topic="bridge",
            group="bridge-writers",
            count=MESSAGES,
        )
        config = ClientConfiguration(broker.endpoint, Credentials())
        with started_simple_consumer(config, "grpc-readers", "bridge", "TagA") as consumer:
            received = receive_all(consumer, MESSAGES)
    sent = {s["msgId"]: s for s in outcome.summary["sent"]}
    assert {m.message_id for m in received} == set(sent)
    for message in received:
        original = sent[message.message_id]
        assert message.body.decode() == original["body"]
        assert message.tag == "TagA"
        assert message.properties["origin"] == "remoting-go"
        assert message.properties["idx"] == str(original["idx"])
        assert list(message.keys) == [f"k{original['idx']}"]
