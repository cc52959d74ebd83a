"""A Spring Boot application on rocketmq-spring-boot-starter (unmodified) against Skiff.

The application (``java/SpringStarterApp.java``) names the broker only as
``rocketmq.name-server``, set to its remoting port, as a RocketMQ shop's
application.properties would. It sends with RocketMQTemplate (syncSend, asyncSend and a
transactional send whose local listener leaves one transaction to the check-back) and
consumes with four @RocketMQMessageListener beans: every message, a tag selector, an
SQL92 selector and the transactional topic. What is asserted is what the application
saw. Without a JDK or Maven the test skips, saying what to install; with
SKIFF_REQUIRE_K8S set (CI) it fails instead.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

from tests.official_clients import built_or_skipped, run_client, spring_starter_app
from tests.support.broker_process import create_topics, data_dir_of, running_broker

from skiff_broker.client.admin import AdminClient
from skiff_broker.metadata.topic_table import TopicConfig

COUNT = 6
TOPIC = "orders"
TX_TOPIC = "payments"
GROUP = "spring-app"


def test_a_spring_boot_application_sends_and_consumes_through_the_remoting_port(
    tmp_path: Path,
) -> None:
    app = built_or_skipped(spring_starter_app)
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 2, 2), TopicConfig(TX_TOPIC, 2, 2))
    logs = tmp_path / "client-logs"
    # Transactions left unknown are checked within seconds, not the default minute.
    checking = ("--transaction-timeout", "1", "--transaction-check-interval", "0.5")
    with running_broker(tmp_path, *checking) as broker:
        outcome = run_client(
            [
                shutil.which("java") or "java",
                f"-Duser.home={logs}",
                f"-Drocketmq.log.root={logs}",
                "-cp",
                app.classpath,
                app.main_class,
                "--spring.main.banner-mode=off",
                f"--rocketmq.name-server={broker.remoting_endpoint}",
                f"--rocketmq.producer.group={GROUP}-producers",
                f"--skiff.topic={TOPIC}",
                f"--skiff.tx-topic={TX_TOPIC}",
                f"--skiff.group={GROUP}",
                f"--skiff.count={COUNT}",
            ],
            logs,
        )
        with AdminClient(broker.endpoint) as admin:
            lag = {
                group: admin.consumer_lag(f"{GROUP}-{group}", TOPIC).total_lag
                # Not the tag group: RocketMQ's client moves its offset over filtered
                # messages at a queue's tail only when nothing else is in flight.
                for group in ("all", "sql")
            }
    summary = outcome.summary
    assert summary["errors"] == [] and outcome.returncode == 0, outcome.stderr[-3000:]

    sent = [s for s in summary["sent"] if s["kind"] != "transaction"]
    assert Counter(s["kind"] for s in sent) == {"sync": COUNT, "async": COUNT}
    assert {s["status"] for s in sent} == {"SEND_OK"}
    by_id = {s["msgId"]: s for s in sent}
    assert len(by_id) == 2 * COUNT

    def received(listener: str) -> list[dict]:
        return [r for r in summary["received"] if r["listener"] == listener]

    # Clustering, one member per group: every message consumed exactly once, as sent.
    everything = received("all")
    assert sorted(r["msgId"] for r in everything) == sorted(by_id)
    for message in everything:
        original = by_id[message["msgId"]]
        assert message["topic"] == TOPIC and message["tag"] == original["tag"]
        assert message["body"] == f"spring-{original['idx']}"
        assert message["origin"] == "spring" and message["idx"] == str(original["idx"])
    # The tag selector: the TagA half only, once each.
    assert sorted(r["msgId"] for r in received("tags")) == sorted(
        m for m, s in by_id.items() if s["tag"] == "TagA"
    )
    # SQL92 over the headers the template turned into user properties.
    assert sorted(r["msgId"] for r in received("sql")) == sorted(
        m for m, s in by_id.items() if s["idx"] >= 3
    )
    # Each group's progress is committed to the end (every queue's tail matched both).
    assert lag == {"all": 0, "sql": 0}

    transactions = {s["idx"]: s for s in summary["sent"] if s["kind"] == "transaction"}
    assert {i: s["localState"] for i, s in transactions.items()} == {
        0: "COMMIT_MESSAGE",
        1: "ROLLBACK_MESSAGE",
        2: "UNKNOW",
    }
    # The unknown one was asked about by the broker, and the listener's answer committed it.
    assert transactions[2]["msgId"] in {c["msgId"] for c in summary["checks"]}
    assert "1" not in {c["idx"] for c in summary["checks"]}
    delivered = received("tx")
    assert sorted(r["msgId"] for r in delivered) == sorted(transactions[i]["msgId"] for i in (0, 2))
    assert {r["body"] for r in delivered} == {"tx-0", "tx-2"}
