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
from rocketmq import ClientConfiguration, Credentials, Message
from tests.official_clients import JavaClient, built_or_skipped, remoting_java_client, run_client
from tests.support.broker_process import create_topics, data_dir_of, running_broker
from tests.support.official_client import receive_all, started_producer, started_simple_consumer

from skiff_broker.client.admin import AdminClient
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
    # SQL92 over user properties, filtered by the broker: every kind's idx >= 1.
    selected = outcome.summary["selected"]
    assert sorted(int(m["properties"]["idx"]) for m in selected) == sorted(
        int(s["idx"]) for s in sent if int(s["idx"]) >= 1
    )
    assert {m["msgId"] for m in selected} == {s["msgId"] for s in sent if int(s["idx"]) >= 1}
    sync_sent = {s["msgId"]: s for s in sent if s["kind"] == "sync"}
    for message in received:
        if message["msgId"] in sync_sent:
            assert message["queueId"] == sync_sent[message["msgId"]]["queueId"]
            assert message["queueOffset"] == sync_sent[message["msgId"]]["queueOffset"]


def test_messages_cross_between_the_grpc_and_remoting_clients_with_ids_and_offsets(
    tmp_path: Path, remoting_java: JavaClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("bridge", 2, 2))
    logs = tmp_path / "client-logs"
    with running_broker(tmp_path) as broker:
        config = ClientConfiguration(broker.endpoint, Credentials())
        grpc_sent = {}
        with started_producer(config, "bridge") as producer:
            for i in range(MESSAGES):
                message = Message()
                message.topic = "bridge"
                message.body = f"grpc-{i}".encode()
                message.tag = "FromGrpc"
                message.keys = f"g{i}"
                message.add_property("origin", "grpc")
                grpc_sent[producer.send(message).message_id] = message
        # A 4.x lite pull consumer reads the 5.x client's messages and commits its offsets.
        pulled = run_client(
            remoting_java.command(
                "lite-pull",
                logs,
                namesrv=broker.remoting_endpoint,
                topic="bridge",
                group="bridge-readers",
                count=MESSAGES,
            ),
            logs,
        )
        assert pulled.errors == [], pulled.stderr[-3000:]
        by_id = {r["msgId"]: r for r in pulled.summary["received"]}
        assert set(by_id) == set(grpc_sent)
        for message_id, original in grpc_sent.items():
            got = by_id[message_id]
            assert got["body"] == original.body.decode() and got["tag"] == "FromGrpc"
            assert got["properties"]["origin"] == "grpc"
            assert set(got["properties"]["KEYS"].split()) == set(original.keys)
        # The offsets it committed over remoting are the group's on the gRPC side.
        with AdminClient(broker.endpoint) as admin:
            lag = admin.consumer_lag("bridge-readers", "bridge")
        assert lag.total_lag == 0
        assert sum(q.consumer_offset for q in lag.queues) == MESSAGES
        # The other way: a 4.x producer's messages read by the 5.x client, same IDs.
        produced = run_client(
            remoting_java.command(
                "send", logs, namesrv=broker.remoting_endpoint, topic="bridge", count=MESSAGES
            ),
            logs,
        )
        assert produced.errors == [], produced.stderr[-3000:]
        remoting_ids = {s["msgId"] for s in produced.summary["sent"]}
        with started_simple_consumer(config, "grpc-readers", "bridge", "TagA") as consumer:
            received = receive_all(consumer, MESSAGES)
    assert {m.message_id for m in received} == remoting_ids
    for message in received:
        assert message.tag == "TagA" and message.properties["origin"] == "remoting"
        assert message.body.decode().startswith("remoting-")
        (key,) = message.keys
        assert key.startswith("k")


def test_clustering_consumers_of_one_group_split_the_queues_and_take_over_when_one_leaves(
    tmp_path: Path, remoting_java: JavaClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("shared", 4, 4))
    logs = tmp_path / "client-logs"
    count = 12
    with running_broker(tmp_path) as broker:
        outcome = run_client(
            remoting_java.command(
                "rebalance",
                logs,
                namesrv=broker.remoting_endpoint,
                topic="shared",
                group="sharers",
                count=count,
            ),
            logs,
        )
    assert outcome.errors == [] and outcome.returncode == 0, outcome.stderr[-3000:]
    sent = [s["msgId"] for s in outcome.summary["sent"]]
    received = outcome.summary["received"]
    shared = [r for r in received if r["phase"] == 1]
    alone = [r for r in received if r["phase"] == 2]
    # While both are members each message goes to one of them, and both get some.
    assert sorted(r["message"]["msgId"] for r in shared) == sorted(sent[:count])
    assert {r["consumer"] for r in shared} == {"a", "b"}
    # Once b left, a took its queues over and consumes everything sent since. As in
    # RocketMQ (at least once), a message b consumed but had not yet committed when it left
    # may come to a again; nothing else may.
    later = set(sent[count:])
    alone_ids = [r["message"]["msgId"] for r in alone]
    assert sorted(m for m in alone_ids if m in later) == sorted(later)
    assert {m for m in alone_ids if m not in later} <= set(sent[:count])
    assert {r["consumer"] for r in alone} == {"a"}
