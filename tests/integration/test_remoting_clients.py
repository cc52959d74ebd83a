"""The unmodified RocketMQ 4.x Java client (rocketmq-client, remoting protocol) against Skiff.

The client's ``namesrvAddr`` is the broker's remoting port and nothing else changes: it
fetches routes there, which point back at that port, sends there and pulls there. One JVM
run covers sync, async, oneway and batch sends and a clustering push consumer with a tag
filter, so the JVM starts stay few. Without a JDK or Maven the tests skip, saying what to
install; with SKIFF_REQUIRE_K8S set (CI) they fail instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.official_clients import JavaClient, built_or_skipped, remoting_java_client, run_client
from tests.support.broker_process import create_topics, data_dir_of, running_broker

from skiff_broker.metadata.topic_table import TopicConfig

MESSAGES = 4


@pytest.fixture(scope="session")
def remoting_java() -> JavaClient:
    return built_or_skipped(remoting_java_client)


def test_a_4x_producer_and_push_consumer_work_with_namesrv_set_to_the_broker(
    tmp_path: Path, remoting_java: JavaClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("orders", 2, 2))
    with running_broker(tmp_path) as broker:
        outcome = run_client(
            remoting_java.command(
                "produce-consume",
                tmp_path / "client-logs",
                namesrv=broker.remoting_endpoint,
                topic="orders",
                group="order-readers",
                count=MESSAGES,
            ),
            tmp_path / "client-logs",
        )
    assert outcome.errors == [] and outcome.returncode == 0, outcome.stderr[-3000:]
    sent = outcome.summary["sent"]
    kinds = [s["kind"] for s in sent]
    assert kinds.count("sync") == kinds.count("async") == MESSAGES
    assert kinds.count("oneway") == kinds.count("batch") == MESSAGES
    for entry in sent:
        if entry["kind"] in ("sync", "async"):
            assert entry["status"] == "SEND_OK"
            # RocketMQ's offset message ID: store host (8 bytes) and log offset (8 bytes).
            assert len(entry["offsetMsgId"]) == 32 and entry["offsetMsgId"] != entry["msgId"]
    # Every TagA message arrived once, each with the ID its send returned; no TagB did.
    wanted = {s["msgId"] for s in sent if s["tag"] == "TagA"}
    received = outcome.summary["received"]
    assert {r["tag"] for r in received} == {"TagA"}
    assert {r["msgId"] for r in received} == wanted
    for message in received:
        assert message["properties"]["origin"] == "remoting"
        assert message["properties"]["KEYS"].startswith("k")
        assert message["topic"] == "orders"
    sync_sent = {s["msgId"]: s for s in sent if s["kind"] == "sync"}
    for message in received:
        if message["msgId"] in sync_sent:
            assert message["queueId"] == sync_sent[message["msgId"]]["queueId"]
            assert message["queueOffset"] == sync_sent[message["msgId"]]["queueOffset"]
