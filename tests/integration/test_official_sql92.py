"""SQL92 subscriptions of the official Java (5.x) and Go (v5) clients against Skiff.

One run of each client program (tests/official_clients, mode ``sql92``) sends five
messages to a normal and to a FIFO topic, each with a property ``run`` naming the run and
properties ``a`` and ``b``: two that match ``a > 5 AND b = 'x'``, one below it, one without
``a`` and one whose ``a`` is no number. Fresh groups then subscribe with SimpleConsumers
("match", "null": ``a IS NULL``, "not": ``NOT (a > 5)``), with a PushConsumer ("match";
Java only, the Go client v5.1 has none) and with ``a > > 1``, which does not parse: that
subscription's receive is refused with ILLEGAL_FILTER_EXPRESSION and the position of the
error. Every expression is ANDed with ``run = '<run>'``, so runs do not see each other.

With ``SKIFF_COMPARE_ROCKETMQ=1`` the module also starts Apache RocketMQ 5.3.3 (name server
and proxy in local mode, ``enablePropertyFilter=true``; bench/peer_brokers.py, installed
from Maven Central by bench/peer_install.py on first use), runs the same two programs
against it and asserts that both systems delivered the same messages and both refused
the bad expression; what each answered is printed (``pytest -s``) and written to
``sql92-answers.json`` in the test's folder. A RocketMQ start costs a minute or more, so CI
leaves it off. Where Skiff differs on purpose: RocketMQ's proxy refuses the expression
with INTERNAL_ERROR (50001) "parse the consumer's subscription failed", a code the
clients treat as the server's fault and with no word of where the error is; Skiff answers
ILLEGAL_FILTER_EXPRESSION (40010), the v2 protocol's code for it, with the position.

Without a JDK, Maven or Go the tests skip, saying what to install; with SKIFF_REQUIRE_K8S
set (CI) they fail instead.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from tests.official_clients import (
    GoClient,
    JavaClient,
    Outcome,
    built_or_skipped,
    go_client,
    java_client,
    run_client,
)
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess
from tests.support.rocketmq_peer import COMPARE, COMPARE_REASON, rocketmq_peer

from skiff_broker.metadata.topic_table import MessageType, TopicConfig

NORMAL_TOPIC, FIFO_TOPIC = "sql92-normal", "sql92-fifo"
# What each subscription must get, by the names the programs give the messages sent.
EXPECTED = {
    "match": ["match-1", "match-2"],
    "null": ["missing"],  # a IS NULL
    # NOT of a comparison with a missing a is unknown, with "seven" a type mismatch:
    # neither is TRUE, so only the message below 5 comes.
    "not": ["below"],
}

broker = module_broker(
    "sql92-clients",
    topics=(
        TopicConfig(NORMAL_TOPIC, 4, 4),
        TopicConfig(FIFO_TOPIC, 4, 4, message_type=MessageType.FIFO),
    ),
)
rocketmq = rocketmq_peer(
    {NORMAL_TOPIC: "NORMAL", FIFO_TOPIC: "FIFO"}, settings=("enablePropertyFilter=true",)
)


@pytest.fixture(scope="module")
def java() -> JavaClient:
    return built_or_skipped(java_client)


@pytest.fixture(scope="module")
def go() -> GoClient:
    return built_or_skipped(go_client)


def run_java(java: JavaClient, endpoint: str, logs: Path) -> Outcome:
    command = java.command(
        "sql92", logs, endpoint=endpoint, topic=NORMAL_TOPIC, fifo_topic=FIFO_TOPIC,
        group=f"java-sql-{uuid.uuid4().hex[:6]}", run=uuid.uuid4().hex[:8], deadline_s=90,
    )  # fmt: skip
    return run_client(command, logs)


def run_go(go: GoClient, endpoint: str, logs: Path) -> Outcome:
    command = go.command(
        mode="sql92", endpoint=endpoint, topic=NORMAL_TOPIC, fifo_topic=FIFO_TOPIC,
        group=f"go-sql-{uuid.uuid4().hex[:6]}", run=uuid.uuid4().hex[:8], deadline_s=90,
    )  # fmt: skip
    return run_client(command, logs)


def answers(outcome: Outcome) -> dict[str, dict]:
    """Per topic, what each subscription got, as the names of the messages sent, and the
    refusal of the bad expression."""
    named: dict[str, dict] = {}
    for topic, seen in outcome.summary["topics"].items():
        names = {message_id: name for name, message_id in seen["sent"].items()}
        named[topic] = {
            "sent": sorted(seen["sent"]),
            "simple": {k: [names.get(i, i) for i in ids] for k, ids in seen["simple"].items()},
            "push": {k: [names.get(i, i) for i in ids] for k, ids in seen.get("push", {}).items()},
            "refused": seen["refused"],
        }
    return named


def assert_sql92_delivered_as_rocketmq_defines(outcome: Outcome, *, push: bool) -> None:
    assert outcome.errors == [], outcome.stderr[-3000:]
    assert outcome.returncode == 0
    for topic, got in answers(outcome).items():
        assert len(got["sent"]) == 5, topic
        for name, wanted in EXPECTED.items():
            if topic == FIFO_TOPIC:  # one message group: in the order sent
                assert got["simple"][name] == wanted, (topic, name, got)
            else:
                assert sorted(got["simple"][name]) == wanted, (topic, name, got)
        if push:
            assert sorted(got["push"]["match"]) == EXPECTED["match"], (topic, got)


def test_java_sql92_subscriptions_on_normal_and_fifo_topics(java, broker, tmp_path):
    outcome = run_java(java, broker.endpoint, tmp_path / "logs")
    assert_sql92_delivered_as_rocketmq_defines(outcome, push=True)
    for topic, got in answers(outcome).items():
        refused = got["refused"]
        assert "response-code=40010" in refused, refused
        assert "position 5" in refused, (topic, refused)
    assert broker_errors(broker) == []


def test_go_sql92_subscriptions_on_normal_and_fifo_topics(go, broker, tmp_path):
    outcome = run_go(go, broker.endpoint, tmp_path / "logs")
    assert_sql92_delivered_as_rocketmq_defines(outcome, push=False)
    for topic, got in answers(outcome).items():
        refused = got["refused"]
        assert "ILLEGAL_FILTER_EXPRESSION" in refused, refused
        assert "position 5" in refused, (topic, refused)
    assert broker_errors(broker) == []


def broker_errors(process: BrokerProcess) -> list[dict]:
    return [r for r in process.log_lines() if r.get("level") == "error"]


@pytest.mark.skipif(not COMPARE, reason=COMPARE_REASON)
def test_rocketmq_delivers_and_refuses_as_skiff_does(java, go, broker, rocketmq, tmp_path):
    seen = {
        "rocketmq": {
            "java": run_java(java, rocketmq.endpoint, tmp_path / "rocketmq-java"),
            "go": run_go(go, rocketmq.endpoint, tmp_path / "rocketmq-go"),
        },
        "skiff": {
            "java": run_java(java, broker.endpoint, tmp_path / "skiff-java"),
            "go": run_go(go, broker.endpoint, tmp_path / "skiff-go"),
        },
    }
    report = {
        system: {client: {"answers": answers(o), "errors": o.errors} for client, o in runs.items()}
        for system, runs in seen.items()
    }
    text = json.dumps(report, indent=2)
    (tmp_path / "sql92-answers.json").write_text(text)
    print(text)
    for client in ("java", "go"):
        theirs = report["rocketmq"][client]["answers"]
        ours = report["skiff"][client]["answers"]
        for topic in (NORMAL_TOPIC, FIFO_TOPIC):
            for kind in ("simple", "push"):
                assert _sorted(ours[topic][kind]) == _sorted(theirs[topic][kind]), (
                    client, topic, kind, text,
                )  # fmt: skip
            # Both refuse it; the codes differ on purpose (the module's docstring says why).
            assert "parse the consumer's subscription failed" in theirs[topic]["refused"], text
            assert _code(theirs[topic]["refused"]) in ("50001]", "INTERNAL_SERVER_ERROR"), text
            assert _code(ours[topic]["refused"]) in ("40010]", "ILLEGAL_FILTER_EXPRESSION"), text


def _sorted(got: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: sorted(ids) for name, ids in got.items()}


def _code(refusal: str) -> str:
    """The status code in a client's error text (Java: code=N, Go: CODE: NAME)."""
    for marker in ("code=", "CODE: "):
        if marker in refusal:
            return refusal.split(marker, 1)[1].split(",")[0].split(";")[0].split()[0]
    return refusal
