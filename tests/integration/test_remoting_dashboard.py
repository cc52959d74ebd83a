"""The RocketMQ Dashboard (built unmodified from its source) against a Skiff broker.

The Dashboard runs as its own Spring Boot jar with ``rocketmq.config.namesrvAddrs`` set
to the broker's remoting port and ``isVIPChannel`` off (Skiff has no second, "VIP" port
two below the remoting one, like RocketMQ's proxy with its one port). The broker holds
what a 4.x application left there (``java/RemotingClient.java``: sends of every kind, two
consumer groups), and one client stays online as raw remoting frames (a heartbeat as a
producer of one group and a consumer of another: no official program stays connected
as both while the Dashboard is asked). Each assertion is what a page shows, read from
the REST endpoint it calls.
Without a JDK, Maven or the Dashboard's source the test skips, saying what is missing;
with SKIFF_REQUIRE_K8S set (CI) it fails instead.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_remoting_port import Remoting
from tests.official_clients import built_or_skipped, remoting_java_client, run_client
from tests.official_clients.dashboard import dashboard_jar
from tests.support.broker_process import create_topics, data_dir_of, running_broker
from tests.support.waiting import wait_for

from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.remoting.codes import RequestCode

TOPIC = "orders"
GROUP = "order-readers"
PRODUCER_GROUP = "billing-producers"
ONLINE_GROUP = "audit-readers"
COUNT = 3
# A cold Spring Boot start of the Dashboard on a busy machine.
START_DEADLINE_S = 240.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Dashboard:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: object) -> Any:
        """The ``data`` of the Dashboard's answer; a failure names its errMsg."""
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        with urllib.request.urlopen(f"{self.base}/{path}?{query}", timeout=60) as answer:
            document = json.loads(answer.read())
        assert document["status"] == 0, (path, document["errMsg"])
        return document["data"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/cluster/list.query", timeout=5):
                return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False


@contextlib.contextmanager
def running_dashboard(jar: Path, namesrv: str, home: Path) -> Iterator[Dashboard]:
    port = _free_port()
    home.mkdir(parents=True, exist_ok=True)
    log = home / "dashboard.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                shutil.which("java") or "java",
                f"-Duser.home={home}",
                "-jar",
                str(jar),
                "--server.address=127.0.0.1",
                f"--server.port={port}",
                f"--rocketmq.config.namesrvAddrs={namesrv}",
                "--rocketmq.config.isVIPChannel=false",
                f"--rocketmq.config.dataPath={home / 'data'}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    dashboard = Dashboard(port)
    try:
        wait_for(
            lambda: dashboard.ready() or proc.poll() is not None,
            "the Dashboard to answer",
            deadline_s=START_DEADLINE_S,
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        yield dashboard
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _online_client(endpoint: str) -> Remoting:
    """A client heartbeating as a producer of PRODUCER_GROUP and a consumer of ONLINE_GROUP."""
    producer = Remoting(endpoint)
    heartbeat = {
        "clientID": "127.0.0.1@billing",
        "producerDataSet": [{"groupName": PRODUCER_GROUP}],
        "consumerDataSet": [
            {
                "groupName": ONLINE_GROUP,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [
                    {
                        "topic": TOPIC,
                        "subString": "TagA || TagB",
                        "expressionType": "TAG",
                        "tagsSet": ["TagA", "TagB"],
                        "codeSet": [],
                        "subVersion": 0,
                        "classFilterMode": False,
                    }
                ],
            }
        ],
    }
    answer = producer.call(RequestCode.HEART_BEAT, json.dumps(heartbeat).encode())
    assert answer.code == 0, answer.remark
    return producer


@pytest.mark.timeout(900)
def test_the_dashboards_main_pages_show_skiffs_data(tmp_path: Path) -> None:
    jar = built_or_skipped(dashboard_jar)
    remoting_java = built_or_skipped(remoting_java_client)
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 2, 2))
    logs = tmp_path / "client-logs"
    with running_broker(tmp_path) as broker:
        namesrv = broker.remoting_endpoint
        seeded = run_client(
            remoting_java.command(
                "produce-consume", logs, namesrv=namesrv, topic=TOPIC, group=GROUP, count=COUNT
            ),
            logs,
        )
        assert seeded.errors == [], seeded.stderr[-3000:]
        sent = seeded.summary["sent"]
        stored = len(sent)
        producer = _online_client(namesrv)
        try:
            with running_dashboard(jar, namesrv, tmp_path / "dashboard") as dashboard:
                pages = _read_pages(dashboard, namesrv, sent)
        finally:
            producer.close()

    # Cluster page: the broker at its remoting address, with its runtime figures.
    cluster = pages["cluster"]
    assert cluster["clusterInfo"]["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    assert cluster["clusterInfo"]["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": namesrv}
    figures = cluster["brokerServer"]["broker-a"]["0"]
    assert figures["brokerVersionDesc"].startswith("Skiff")
    assert int(figures["commitLogMaxOffset"]) > 0
    assert pages["broker_config"]["brokerName"] == "broker-a"
    assert pages["broker_config"]["brokerClusterName"] == "DefaultCluster"

    # Topic page: the list, each topic's kind, its route, its queues' offsets.
    assert TOPIC in pages["topics"]["topicList"]
    types = pages["topic_types"]
    kinds = dict(zip(types["topicNameList"], types["messageTypeList"], strict=True))
    assert kinds[TOPIC] == "NORMAL"
    # The cluster's and broker's names, as RocketMQ's name server lists them; none of
    # Skiff's internal topics.
    system = {name for name, kind in kinds.items() if kind == "SYSTEM"}
    assert system == {"%SYS%DefaultCluster", "%SYS%broker-a"}
    route = pages["route"]
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": namesrv}
    assert route["queueDatas"][0]["readQueueNums"] == 2
    offsets = pages["stats"]["offsetTable"]
    assert len(offsets) == 2
    assert sum(q["maxOffset"] for q in offsets.values()) == stored
    config = pages["topic_config"][0]
    assert (config["topicName"], config["readQueueNums"], config["perm"]) == (TOPIC, 2, 6)

    # Consumer pages: each group of the topic, caught up with everything stored.
    by_topic = pages["consumers_of_topic"]
    assert {GROUP, f"{GROUP}-sql"} <= set(by_topic)
    assert by_topic[GROUP]["diffTotal"] == 0
    assert sum(q["brokerOffset"] for q in by_topic[GROUP]["queueStatInfoList"]) == stored
    progress = pages["topics_of_group"]
    assert [(p["topic"], p["diffTotal"]) for p in progress if p["topic"] == TOPIC] == [(TOPIC, 0)]

    # A consumer group's clients: the online one, how it consumes and what.
    online = pages["consumer_connection"]
    assert [c["clientId"] for c in online["connectionSet"]] == ["127.0.0.1@billing"]
    assert (online["consumeType"], online["messageModel"]) == ("CONSUME_PASSIVELY", "CLUSTERING")
    assert online["subscriptionTable"][TOPIC]["subString"] == "TagA || TagB"

    # Producer page: the online producer's connection.
    connections = pages["producer"]["connectionSet"]
    assert [(c["clientId"], c["clientAddr"].split(":")[0]) for c in connections] == [
        ("127.0.0.1@billing", "127.0.0.1")
    ]

    # Message page: by ID, by key, by topic and time.
    first = sent[0]
    view = pages["by_id"]["messageView"]
    assert (view["msgId"], view["topic"]) == (first["msgId"], TOPIC)
    assert (view["queueId"], view["queueOffset"]) == (first["queueId"], first["queueOffset"])
    assert view["properties"]["TAGS"] == first["tag"] and view["messageBody"] == "sync-0"
    assert view["storeHost"] == namesrv
    assert first["msgId"] in {m["msgId"] for m in pages["by_key"]}
    assert {m["properties"]["KEYS"] for m in pages["by_key"]} == {"k0"}
    by_time = {m["msgId"] for m in pages["by_time"]}
    assert {s["msgId"] for s in sent if s.get("msgId")} <= by_time


def _read_pages(dashboard: Dashboard, namesrv: str, sent: list[dict]) -> dict[str, Any]:
    now_ms = int(time.time() * 1000)
    return {
        "cluster": dashboard.get("cluster/list.query"),
        "broker_config": dashboard.get("cluster/brokerConfig.query", brokerAddr=namesrv),
        "topics": dashboard.get("topic/list.query"),
        "topic_types": dashboard.get("topic/list.queryTopicType"),
        "route": dashboard.get("topic/route.query", topic=TOPIC),
        "stats": dashboard.get("topic/stats.query", topic=TOPIC),
        "topic_config": dashboard.get("topic/examineTopicConfig.query", topic=TOPIC),
        "consumers_of_topic": dashboard.get("topic/queryConsumerByTopic.query", topic=TOPIC),
        "topics_of_group": dashboard.get(
            "consumer/queryTopicByConsumer.query", consumerGroup=GROUP, address=namesrv
        ),
        "consumer_connection": dashboard.get(
            "consumer/consumerConnection.query", consumerGroup=ONLINE_GROUP, address=namesrv
        ),
        "producer": dashboard.get(
            "producer/producerConnection.query", producerGroup=PRODUCER_GROUP, topic=TOPIC
        ),
        "by_id": dashboard.get("message/viewMessage.query", topic=TOPIC, msgId=sent[0]["msgId"]),
        "by_key": dashboard.get("message/queryMessageByTopicAndKey.query", topic=TOPIC, key="k0"),
        "by_time": dashboard.get(
            "message/queryMessageByTopic.query", topic=TOPIC, begin=0, end=now_ms + 60_000
        ),
    }
