"""Delivery semantics of the remoting port with the unmodified RocketMQ 4.x Java client.

Retry and dead letters: a push consumer that answers RECONSUME_LATER gets its message again
from ``%RETRY%<group>`` (which it finds a route for and pulls) until maxReconsumeTimes, then
the broker moves it to ``%DLQ%<group>``, where a RocketMQ 5 gRPC client reads it with the
same ID. Without a JDK or Maven the tests skip (SKIFF_REQUIRE_K8S: they fail).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials
from tests.official_clients import JavaClient, built_or_skipped, remoting_java_client, run_client
from tests.support.broker_process import create_topics, data_dir_of, running_broker
from tests.support.official_client import receive_all, started_simple_consumer

from skiff_broker.metadata.topic_table import TopicConfig

MESSAGES = 2
# The Java program's consumer: maxReconsumeTimes 2, so three deliveries in all.
DELIVERIES = 3


@pytest.fixture(scope="session")
def remoting_java() -> JavaClient:
    return built_or_skipped(remoting_java_client)


def test_a_message_consumed_later_comes_back_from_the_retry_topic_then_lands_in_the_dlq(
    tmp_path: Path, remoting_java: JavaClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("payments", 2, 2))
    logs = tmp_path / "client-logs"
    group = "payers"
    with running_broker(tmp_path) as broker:
        outcome = run_client(
            remoting_java.command(
                "retry",
                logs,
                namesrv=broker.remoting_endpoint,
                topic="payments",
                group=group,
                count=MESSAGES,
            ),
            logs,
        )
        assert outcome.errors == [] and outcome.returncode == 0, outcome.stderr[-3000:]
        config = ClientConfiguration(broker.endpoint, Credentials())
        with started_simple_consumer(config, "dlq-readers", f"%DLQ%{group}") as dlq:
            dead = receive_all(dlq, MESSAGES)
    sent = {s["msgId"]: s for s in outcome.summary["sent"]}
    deliveries: dict[str, list[dict]] = defaultdict(list)
    for entry in outcome.summary["received"]:
        deliveries[entry["message"]["msgId"]].append(entry)
    assert set(deliveries) == set(sent)
    for message_id, attempts in deliveries.items():
        # The first delivery and two retries, each counted, then no more.
        assert [a["reconsumeTimes"] for a in attempts] == list(range(DELIVERIES))
        for attempt in attempts:
            message = attempt["message"]
            # The client shows a retry under the topic it was sent to, same ID and body.
            assert message["topic"] == "payments"
            assert message["body"] == f"remoting-{sent[message_id]['idx']}"
        for retried in attempts[1:]:
            properties = retried["message"]["properties"]
            assert properties["RETRY_TOPIC"] == "payments"
            assert properties["ORIGIN_MESSAGE_ID"] == sent[message_id]["offsetMsgId"]
            assert properties["origin"] == "remoting"
    assert {m.message_id for m in dead} == set(sent)
    for message in dead:
        assert message.body.decode() == f"remoting-{sent[message.message_id]['idx']}"
        assert message.tag == "TagA" and message.properties["origin"] == "remoting"


def test_orderly_consumers_of_one_group_hold_disjoint_queue_locks_and_consume_in_order(
    tmp_path: Path, remoting_java: JavaClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("ledger", 4, 4))
    logs = tmp_path / "client-logs"
    per_queue = 6
    with running_broker(tmp_path) as broker:
        outcome = run_client(
            remoting_java.command(
                "orderly",
                logs,
                namesrv=broker.remoting_endpoint,
                topic="ledger",
                group="bookkeepers",
                count=per_queue,
            ),
            logs,
        )
    # Includes the watcher's: at no moment did a and b both hold one queue's lock.
    assert outcome.errors == [] and outcome.returncode == 0, outcome.stderr[-3000:]
    by_queue: dict[int, list[dict]] = defaultdict(list)
    for entry in outcome.summary["received"]:
        by_queue[entry["message"]["queueId"]].append(entry)
    assert sorted(by_queue) == [0, 1, 2, 3]
    for queue_id, entries in by_queue.items():
        # Each queue's messages once each, in the order they were sent, by one consumer.
        assert [e["message"]["body"] for e in entries] == [
            f"q{queue_id}-{i}" for i in range(per_queue)
        ]
        assert len({e["consumer"] for e in entries}) == 1
    assert {e["consumer"] for e in outcome.summary["received"]} == {"a", "b"}


def test_a_transaction_left_unknown_is_committed_by_the_producers_answer_to_a_check(
    tmp_path: Path, remoting_java: JavaClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("orders-tx", 2, 2))
    logs = tmp_path / "client-logs"
    count = 4
    checking = ("--transaction-timeout", "1", "--transaction-check-interval", "0.5")
    with running_broker(tmp_path, *checking) as broker:
        outcome = run_client(
            remoting_java.command(
                "transaction",
                logs,
                namesrv=broker.remoting_endpoint,
                topic="orders-tx",
                group="tx-readers",
                count=count,
            ),
            logs,
        )
    assert outcome.errors == [] and outcome.returncode == 0, outcome.stderr[-3000:]
    sent = {s["msgId"]: s for s in outcome.summary["sent"]}
    assert [s["status"] for s in sent.values()] == ["SEND_OK"] * count
    by_idx = {s["idx"]: s for s in sent.values()}
    assert by_idx[0]["localState"] == "COMMIT_MESSAGE"
    assert by_idx[1]["localState"] == "ROLLBACK_MESSAGE"
    entries = outcome.summary["received"]
    checks = [e for e in entries if e["kind"] == "check"]
    delivered = [e["message"] for e in entries if e["kind"] == "delivery"]
    # Every transaction left UNKNOW was asked about, with the message as it was sent.
    unknown = {s["msgId"] for s in sent.values() if s["localState"] == "UNKNOW"}
    assert unknown and unknown <= {c["msgId"] for c in checks}
    for check in checks:
        assert check["topic"] == "orders-tx"
        assert check["body"] == f"tx-{sent[check['msgId']]['idx']}"
    # Committed at once or after the check: delivered once each; the rolled-back one never.
    wanted = {m for m, s in sent.items() if s["idx"] != 1}
    assert sorted(m["msgId"] for m in delivered) == sorted(wanted)
    for message in delivered:
        assert message["body"] == f"tx-{sent[message['msgId']]['idx']}"
        assert message["properties"]["origin"] == "remoting"
