"""Remoting routes across groups (``--cluster-peers``), with real broker processes.

A 4.x client whose ``namesrvAddr`` is one broker's remoting port gets routes naming
every group at its own brokers' remoting ports: the master as broker id 0, a replica
as a read-only id from 1, as RocketMQ's name server lists them. The unmodified 4.9.8
client sends to and consumes from the queues of both groups through that one
address. A broker's ``--remoting-advertise`` is what every broker's routes name it by.
The topic list (``mqadmin topicList``, the Dashboard's topic page) asked of any broker
names every group's topics, as RocketMQ's name server does.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.test_remoting_mqadmin import run_mqadmin
from tests.official_clients import (
    JavaClient,
    built_or_skipped,
    mqadmin_batch,
    remoting_java_client,
    run_client,
)
from tests.support.broker_process import (
    SKIFF,
    BrokerProcess,
    broker_env,
    create_topics,
    data_dir_of,
    start_broker,
)
from tests.support.remoting_client import remoting_call
from tests.support.waiting import wait_for

from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.remoting.codes import RequestCode
from skiff_broker.wire import property_names as prop

TOPIC = "shipments"
READ_WRITE = 6
READ_ONLY = 4


class Groups:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.running: list[BrokerProcess] = []

    def start(
        self,
        home: str,
        group: str,
        *args: str,
        queues: int = 4,
        also: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> BrokerProcess:
        """A broker of ``group`` holding ``TOPIC`` and the topics named in ``also``."""
        folder = self.tmp_path / home
        folder.mkdir()
        create_topics(
            data_dir_of(folder),
            TopicConfig(TOPIC, queues, queues),
            *(TopicConfig(name, 1, 1) for name in also),
        )
        broker = start_broker(folder, "--broker-name", group, *args, env=env)
        self.running.append(broker)
        return broker

    def cleanup(self) -> None:
        for broker in self.running:
            broker.kill()


@pytest.fixture
def groups(tmp_path: Path) -> Iterator[Groups]:
    started = Groups(tmp_path)
    try:
        yield started
    finally:
        started.cleanup()


def remoting_route(endpoint: str) -> dict:
    answer = remoting_call(endpoint, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)
    assert answer.code == 0, answer.remark
    return json.loads(answer.body)


def addresses_by_group(route: dict) -> dict[str, dict[str, str]]:
    return {data["brokerName"]: data["brokerAddrs"] for data in route["brokerDatas"]}


def test_routes_name_every_group_at_its_brokers_remoting_ports(groups: Groups) -> None:
    b = groups.start("b0", "orders-b", queues=6)
    replica = groups.start(
        "b1", "orders-b", "--role", "REPLICA", "--master-address", b.ha_endpoint, queues=6
    )
    a = groups.start("a0", "orders-a", "--cluster-peers", f"{b.endpoint},{replica.endpoint}")
    route = remoting_route(a.remoting_endpoint)
    assert addresses_by_group(route) == {
        "orders-a": {"0": a.remoting_endpoint},
        "orders-b": {"0": b.remoting_endpoint, "1": replica.remoting_endpoint},
    }
    queues = {q["brokerName"]: q for q in route["queueDatas"]}
    assert queues["orders-a"]["writeQueueNums"] == 4
    assert queues["orders-b"]["writeQueueNums"] == 6
    assert {q["perm"] for q in queues.values()} == {READ_WRITE}
    cluster = json.loads(
        remoting_call(a.remoting_endpoint, RequestCode.GET_BROKER_CLUSTER_INFO).body
    )
    assert cluster["clusterAddrTable"] == {"DefaultCluster": ["orders-a", "orders-b"]}
    assert cluster["brokerAddrTable"]["orders-b"]["brokerAddrs"] == {
        "0": b.remoting_endpoint,
        "1": replica.remoting_endpoint,
    }

    # Without its master the group is served read-only from its replica, at id 1.
    b.stop()
    wait_for(
        lambda: (
            addresses_by_group(remoting_route(a.remoting_endpoint)).get("orders-b")
            == {"1": replica.remoting_endpoint}
        ),
        "the stopped master to leave the remoting route",
        deadline_s=30,
    )
    queues = {q["brokerName"]: q for q in remoting_route(a.remoting_endpoint)["queueDatas"]}
    assert queues["orders-b"]["perm"] == READ_ONLY and queues["orders-a"]["perm"] == READ_WRITE


def test_a_broker_is_routed_at_its_advertised_remoting_address(groups: Groups) -> None:
    b = groups.start("b0", "orders-b", "--remoting-advertise", "orders-b.example.net:8080")
    a = groups.start("a0", "orders-a", "--cluster-peers", b.endpoint)
    # Other brokers name it so, and so does it itself.
    assert addresses_by_group(remoting_route(a.remoting_endpoint))["orders-b"] == {
        "0": "orders-b.example.net:8080"
    }
    assert addresses_by_group(remoting_route(b.remoting_endpoint)) == {
        "orders-b": {"0": "orders-b.example.net:8080"}
    }


def topic_list(endpoint: str) -> list[str]:
    answer = remoting_call(endpoint, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert answer.code == 0, answer.remark
    return json.loads(answer.body)["topicList"]


def test_the_topic_list_asked_of_one_group_names_every_groups_topics(groups: Groups) -> None:
    # The half-message topic in b's table stands for any broker-internal topic.
    b = groups.start("b0", "orders-b", also=("returns", prop.HALF_TOPIC))
    a = groups.start("a0", "orders-a", "--cluster-peers", b.endpoint, also=("invoices",))
    assert sorted(topic_list(a.remoting_endpoint)) == ["invoices", "returns", TOPIC]
    # A topic listed is a topic routed: the client asking a finds returns on b.
    route = json.loads(
        remoting_call(a.remoting_endpoint, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="returns").body
    )
    assert addresses_by_group(route) == {"orders-b": {"0": b.remoting_endpoint}}
    # b, without peers of its own, lists its topics only.
    assert sorted(topic_list(b.remoting_endpoint)) == ["returns", TOPIC]

    # A group that does not answer is left out; the rest of the list still comes.
    b.kill()
    wait_for(
        lambda: "returns" not in topic_list(a.remoting_endpoint),
        "the stopped group's topics to leave the topic list",
        deadline_s=30,
    )
    assert sorted(topic_list(a.remoting_endpoint)) == ["invoices", TOPIC]


@pytest.fixture(scope="session")
def mqadmin() -> JavaClient:
    return built_or_skipped(mqadmin_batch)


def test_mqadmin_topic_list_with_one_broker_as_namesrv_names_every_groups_topics(
    groups: Groups, tmp_path: Path, mqadmin: JavaClient
) -> None:
    # With authentication on: a asks b for its topics signed as the shared bootstrap user.
    auth = {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": "root:root-secret"}
    b = groups.start("b0", "orders-b", also=("returns",), env=auth)
    a = groups.start("a0", "orders-a", "--cluster-peers", b.endpoint, also=("invoices",), env=auth)
    home = tmp_path / "rocketmq-home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "tools.yml").write_text("accessKey: root\nsecretKey: root-secret\n")
    n = ["-n", a.remoting_endpoint]
    summary = run_mqadmin(
        mqadmin,
        a.remoting_endpoint,
        tmp_path / "client-logs",
        [["topicList", *n], ["topicList", *n, "-c"]],
        count=0,
        home=home,
    )
    plain, by_cluster = summary["commands"]
    for result in (plain, by_cluster):
        assert result["err"] == "", (result["args"], result["err"][-3000:])
    assert sorted(plain["out"].split()) == ["invoices", "returns", TOPIC]
    # The cluster form finds each topic's cluster through its route, on either group.
    listed = {tuple(line.split()[:2]) for line in by_cluster["out"].splitlines()[1:]}
    assert listed == {("DefaultCluster", name) for name in ("invoices", "returns", TOPIC)}


def refused_start(tmp_path: Path, settings: dict[str, str]) -> str:
    """What ``skiff broker`` says when ``settings`` stop it before it opens anything."""
    done = subprocess.run(
        [*SKIFF, "broker", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0"],
        env=broker_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert not (tmp_path / "d" / "commitlog").exists()
    return done.stderr


def test_remoting_addresses_that_cannot_work_stop_the_start_naming_the_option(
    tmp_path: Path,
) -> None:
    said = refused_start(tmp_path, {"SKIFF_REMOTING_ADVERTISE": "no-port-here"})
    assert "--remoting-advertise must be HOST:PORT, got 'no-port-here'" in said
    said = refused_start(
        tmp_path,
        {"SKIFF_REMOTING_LISTEN": "off", "SKIFF_REMOTING_EXTERNAL_LISTEN": "127.0.0.1:0"},
    )
    assert "--remoting-external-listen needs the remoting port" in said


@pytest.fixture(scope="session")
def remoting_java() -> JavaClient:
    return built_or_skipped(remoting_java_client)


def test_a_4x_client_with_one_broker_as_namesrv_sends_to_and_consumes_from_both_groups(
    groups: Groups, tmp_path: Path, remoting_java: JavaClient
) -> None:
    b = groups.start("b0", "orders-b")
    a = groups.start("a0", "orders-a", "--cluster-peers", b.endpoint)
    logs = tmp_path / "client-logs"
    outcome = run_client(
        remoting_java.command(
            "produce-consume",
            logs,
            namesrv=a.remoting_endpoint,
            topic=TOPIC,
            group="shipment-readers",
            # Sync sends go round the 8 queues of both groups.
            count=8,
        ),
        logs,
    )
    assert outcome.errors == [] and outcome.returncode == 0, outcome.stderr[-3000:]
    sent = outcome.summary["sent"]
    sync = [s for s in sent if s["kind"] == "sync"]
    assert {s["brokerName"] for s in sync} == {"orders-a", "orders-b"}
    assert all(s["status"] == "SEND_OK" for s in sync)
    # Every TagA message, from both groups' queues, was consumed once.
    wanted = {s["msgId"] for s in sent if s["tag"] == "TagA"}
    received = outcome.summary["received"]
    assert sorted(r["msgId"] for r in received) == sorted(wanted)
    # Each group stored what was sent to it: its own remoting port serves it.
    for broker, group in ((a, "orders-a"), (b, "orders-b")):
        stored = sum(
            int(
                remoting_call(
                    broker.remoting_endpoint, RequestCode.GET_MAX_OFFSET, topic=TOPIC, queueId=q
                ).ext_fields["offset"]
            )
            for q in range(4)
        )
        assert stored >= sum(s["brokerName"] == group for s in sync) > 0
