"""The official Java (5.x) and Go (v5) clients, with their default settings, against Skiff.

Both clients default to TLS without verifying the server's certificate; a broker with its
defaults serves TLS and plaintext on one port (permissive) with a self-signed certificate,
so they work unchanged. With ``--auth enabled`` they sign requests with a user's keys;
with ``--tls-mode enforcing`` a client that turned TLS off is refused. The clients run as
programs (tests/official_clients) that send a few messages, receive them back with a
SimpleConsumer and print what happened; in their transaction mode a signed producer
leaves a transaction open and must be asked about it by the broker.

Without a JDK, Maven or Go the tests skip, saying what to install; with SKIFF_REQUIRE_K8S
set (CI, where scripts/test installs them) they fail instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
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
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of, running_broker

from skiff_broker.client.admin import AclEntry, AdminClient
from skiff_broker.client.credentials import Credentials
from skiff_broker.metadata.topic_table import MessageType, TopicConfig

MESSAGES = 10
TOPICS = ("java-topic", "go-topic")
GROUPS = ("java-group", "go-group")
ROOT = ("root", "root-secret")
USER = ("ivy", "ivy-secret")
AUTH_ENV = {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": ":".join(ROOT)}


@pytest.fixture(scope="session")
def java() -> JavaClient:
    return built_or_skipped(java_client)


@pytest.fixture(scope="session")
def go() -> GoClient:
    return built_or_skipped(go_client)


TOPIC_CONFIGS = [TopicConfig(name, 2, 2) for name in TOPICS]


default_broker = module_broker("defaults", topics=TOPIC_CONFIGS)


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp_path = tmp_path_factory.mktemp("auth")
    create_topics(data_dir_of(tmp_path), *TOPIC_CONFIGS)
    with running_broker(tmp_path, env=AUTH_ENV) as broker:
        with AdminClient(broker.endpoint, credentials=Credentials(*ROOT)) as admin:
            admin.apply_user(*USER)
            resources = tuple(f"Topic:{t}" for t in TOPICS) + tuple(f"Group:{g}" for g in GROUPS)
            admin.apply_acl(USER[0], [AclEntry(resources, ("Pub", "Sub"))])
        yield broker


# No replication port: a broker with peers needs --tls-ca in enforcing mode.
enforcing_broker = module_broker(
    "enforcing", "--tls-mode", "enforcing", "--ha-listen", "", topics=TOPIC_CONFIGS
)


def _fresh_group(base: str) -> str:
    """A group of its own: a new group reads the topic from its start, this test's messages too."""
    return f"{base}-{uuid.uuid4().hex[:6]}"


def _java(java: JavaClient, broker: BrokerProcess, tmp_path: Path, **options: object) -> Outcome:
    options.setdefault("group", _fresh_group(GROUPS[0]))
    command = java.command(
        "roundtrip",
        tmp_path / "logs",
        endpoint=broker.endpoint,
        topic=TOPICS[0],
        count=MESSAGES,
        **options,
    )
    return run_client(command, tmp_path / "logs")


def _go(go: GoClient, broker: BrokerProcess, tmp_path: Path, **options: object) -> Outcome:
    options.setdefault("group", _fresh_group(GROUPS[1]))
    command = go.command(endpoint=broker.endpoint, topic=TOPICS[1], count=MESSAGES, **options)
    return run_client(command, tmp_path / "logs")


def assert_every_message_came_back(outcome: Outcome) -> None:
    assert outcome.errors == [], outcome.stderr[-3000:]
    assert outcome.returncode == 0
    assert len(outcome.summary["sent"]) == MESSAGES
    assert sorted(outcome.summary["received"]) == sorted(outcome.summary["sent"])


def broker_errors(broker: BrokerProcess) -> list[dict]:
    return [r for r in broker.log_lines() if r.get("level") == "error"]


def test_java_client_defaults_against_a_default_broker(java, default_broker, tmp_path):
    assert_every_message_came_back(_java(java, default_broker, tmp_path))
    assert broker_errors(default_broker) == []


def test_go_client_defaults_against_a_default_broker(go, default_broker, tmp_path):
    assert_every_message_came_back(_go(go, default_broker, tmp_path))
    assert broker_errors(default_broker) == []


def test_java_client_signs_with_session_credentials(java, auth_broker, tmp_path):
    outcome = _java(
        java, auth_broker, tmp_path, group=GROUPS[0], access_key=USER[0], secret_key=USER[1]
    )
    assert_every_message_came_back(outcome)


def test_go_client_signs_with_session_credentials(go, auth_broker, tmp_path):
    outcome = _go(
        go, auth_broker, tmp_path, group=GROUPS[1], access_key=USER[0], secret_key=USER[1]
    )
    assert_every_message_came_back(outcome)


TRANSACTION_TOPICS = ("java-tx-topic", "go-tx-topic")
TRANSACTION_GROUPS = ("java-tx-group", "go-tx-group")


@pytest.fixture(scope="module")
def transaction_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Authentication on; an open transaction is asked about at once, then every 0.5 s."""
    tmp_path = tmp_path_factory.mktemp("transactions")
    transactional = MessageType.TRANSACTION
    topics = [TopicConfig(t, 2, 2, message_type=transactional) for t in TRANSACTION_TOPICS]
    create_topics(data_dir_of(tmp_path), *topics)
    checking = ("--transaction-timeout", "0", "--transaction-check-interval", "0.5")
    with running_broker(tmp_path, *checking, env=AUTH_ENV) as broker:
        with AdminClient(broker.endpoint, credentials=Credentials(*ROOT)) as admin:
            admin.apply_user(*USER)
            resources = tuple(f"Topic:{t}" for t in TRANSACTION_TOPICS) + tuple(
                f"Group:{g}" for g in TRANSACTION_GROUPS
            )
            admin.apply_acl(USER[0], [AclEntry(resources, ("Pub", "Sub"))])
        yield broker


def assert_the_open_transaction_was_checked_and_committed(outcome: Outcome) -> None:
    assert outcome.errors == [], outcome.stderr[-3000:]
    assert outcome.returncode == 0
    [sent] = outcome.summary["sent"]
    assert sent in outcome.summary["checked"]
    assert outcome.summary["received"] == [sent]


def test_a_signed_java_producer_is_asked_about_its_open_transaction(
    java, transaction_broker, tmp_path
):
    keys = {"access_key": USER[0], "secret_key": USER[1]}
    command = java.command(
        "transaction",
        tmp_path / "logs",
        endpoint=transaction_broker.endpoint,
        topic=TRANSACTION_TOPICS[0],
        group=TRANSACTION_GROUPS[0],
        **keys,
    )
    assert_the_open_transaction_was_checked_and_committed(run_client(command, tmp_path / "logs"))
    assert broker_errors(transaction_broker) == []


def test_a_signed_go_producer_is_asked_about_its_open_transaction(go, transaction_broker, tmp_path):
    command = go.command(
        endpoint=transaction_broker.endpoint,
        topic=TRANSACTION_TOPICS[1],
        group=TRANSACTION_GROUPS[1],
        access_key=USER[0],
        secret_key=USER[1],
        mode="transaction",
    )
    assert_the_open_transaction_was_checked_and_committed(run_client(command, tmp_path / "logs"))
    assert broker_errors(transaction_broker) == []


WRONG_SECRET = f"the signature of access key '{USER[0]}' does not match"


def test_java_client_with_a_wrong_secret_is_told_it_is_unauthorized(java, auth_broker, tmp_path):
    outcome = _java(
        java, auth_broker, tmp_path, group=GROUPS[0], access_key=USER[0], secret_key="not-it"
    )
    assert outcome.returncode == 1
    assert outcome.summary["sent"] == []
    [error] = outcome.errors
    assert "UnauthorizedException" in error and "response-code=40100" in error
    assert WRONG_SECRET in error


def test_go_client_with_a_wrong_secret_is_told_it_is_unauthorized(go, auth_broker, tmp_path):
    outcome = _go(go, auth_broker, tmp_path, group=GROUPS[1], access_key=USER[0], secret_key="x")
    assert outcome.returncode == 1
    assert outcome.summary["sent"] == []
    [error] = outcome.errors
    assert "CODE: UNAUTHORIZED" in error and WRONG_SECRET in error


def test_java_and_go_defaults_work_against_tls_enforcing(java, go, enforcing_broker, tmp_path):
    assert_every_message_came_back(_java(java, enforcing_broker, tmp_path))
    assert_every_message_came_back(_go(go, enforcing_broker, tmp_path))
    assert broker_errors(enforcing_broker) == []


def test_java_client_with_tls_off_is_refused_by_tls_enforcing(java, enforcing_broker, tmp_path):
    outcome = _java(java, enforcing_broker, tmp_path, tls="off", deadline_s=20)
    assert outcome.returncode == 1
    assert outcome.summary["sent"] == []
    [error] = outcome.errors
    assert "UNAVAILABLE" in error
    refusals = [
        r["msg"] for r in enforcing_broker.log_lines() if "plaintext connection" in r["msg"]
    ]
    assert refusals and "--tls-mode enforcing" in refusals[-1]
