"""mqadmin (rocketmq-tools 5.3.x, unmodified) against a Skiff broker's remoting port.

One JVM (``java/MqAdminBatch.java``) sends messages, keeps a push consumer online and
runs every command through ``MQAdminStartup.main`` with ``-n`` set to the broker's
remoting address, so the JVM starts stay few. Each assertion is what an operator reads
in the command's output; the broker's own admin client confirms what the commands
changed. Without a JDK or Maven the test skips, saying what to install; with
SKIFF_REQUIRE_K8S set (CI) it fails instead.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from tests.integration.test_remoting_port import Remoting
from tests.official_clients import JavaClient, built_or_skipped, mqadmin_batch, run_client
from tests.support.broker_process import create_topics, data_dir_of, running_broker

from skiff_broker.client.admin import AdminClient
from skiff_broker.metadata.topic_table import TopicConfig

MESSAGES = 4
TOPIC = "orders"
GROUP = "order-readers"


@pytest.fixture(scope="session")
def mqadmin() -> JavaClient:
    return built_or_skipped(mqadmin_batch)


def _commands(namesrv: str) -> list[list[str]]:
    n = ["-n", namesrv]
    return [
        ["topicList", *n],
        ["topicRoute", *n, "-t", TOPIC],
        ["topicStatus", *n, "-t", TOPIC],
        ["updateTopic", *n, "-b", namesrv, "-t", "fresh", "-r", "3", "-w", "3"],
        ["topicRoute", *n, "-t", "fresh"],
        ["updateTopic", *n, "-b", namesrv, "-t", "fresh", "-r", "2000", "-w", "3"],
        ["updateSubGroup", *n, "-b", namesrv, "-g", "fresh-readers"],
        ["consumerProgress", *n, "-g", GROUP],
        ["consumerConnection", *n, "-g", GROUP],
        ["queryMsgById", *n, "-t", TOPIC, "-i", "{offsetMsgId0}"],
        ["queryMsgByKey", *n, "-t", TOPIC, "-k", "{key0}"],
        ["clusterList", *n],
        ["brokerStatus", *n, "-b", namesrv],
        ["deleteTopic", *n, "-c", "DefaultCluster", "-t", "fresh"],
        ["topicList", *n],
        ["resetOffsetByTime", *n, "-g", GROUP, "-t", TOPIC, "-s", "0"],
        # The cluster forms: every master of the cluster named.
        ["topicList", *n, "-c"],
        ["brokerStatus", *n, "-c", "DefaultCluster"],
        # Every group: found by its retry topic, with its online members.
        ["consumerProgress", *n],
        # A group's settings, and its mode under broker-assigned queues.
        ["updateSubGroup", *n, "-b", namesrv, "-g", "tuned-readers", "-r", "3", "-s", "false"],
        ["setConsumeMode", *n, "-b", namesrv, "-t", TOPIC, "-g", "tuned-readers", "-m", "POP"],
    ]


def run_mqadmin(
    mqadmin: JavaClient,
    namesrv: str,
    logs: Path,
    commands: list[list[str]],
    *,
    count: int = MESSAGES,
    home: Path | None = None,
    await_total: int | None = None,
) -> dict:
    java = shutil.which("java") or "java"
    argv: list[str] = []
    for command in commands:
        argv += ["--", *command]
    outcome = run_client(
        [
            java,
            f"-Duser.home={logs}",
            f"-Drocketmq.log.root={logs}",
            # mqadmin signs with the keys in <rocketmq.home.dir>/conf/tools.yml.
            f"-Drocketmq.home.dir={home or logs}",
            "-cp",
            mqadmin.classpath,
            mqadmin.main_class,
            "--namesrv",
            namesrv,
            "--topic",
            TOPIC,
            "--group",
            GROUP,
            "--count",
            str(count),
            # The reset to the start makes the online consumer read everything again.
            "--await-total",
            str(2 * count if await_total is None else await_total),
            *argv,
        ],
        logs,
    )
    assert outcome.returncode == 0, outcome.stderr[-3000:]
    return outcome.summary


def test_mqadmin_common_commands_work_with_namesrv_set_to_the_broker(
    tmp_path: Path, mqadmin: JavaClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 2, 2))
    with running_broker(tmp_path) as broker:
        namesrv = broker.remoting_endpoint
        summary = run_mqadmin(mqadmin, namesrv, tmp_path / "client-logs", _commands(namesrv))
        with AdminClient(broker.endpoint) as admin:
            topics = {t.name for t in admin.list_topics()}
        remoting = Remoting(namesrv)
        try:
            tuned = json.loads(remoting.call(352, group="tuned-readers").body)
            assignment = {
                "topic": TOPIC, "consumerGroup": "tuned-readers", "clientId": "c",
                "strategyName": "AVG", "messageModel": "CLUSTERING",
            }  # fmt: skip
            assigned = json.loads(remoting.call(400, json.dumps(assignment).encode()).body)
        finally:
            remoting.close()
    results = summary["commands"]
    assert len(results) == len(_commands(namesrv))
    (
        topic_list,
        route,
        status,
        created,
        fresh_route,
        too_many_queues,
        sub_group,
        progress,
        connection,
        by_id,
        by_key,
        cluster,
        broker_status,
        deleted,
        topic_list_after,
        reset,
        topics_by_cluster,
        status_by_cluster,
        all_groups,
        tuned_group,
        consume_mode,
    ) = results
    for result in results:
        if result is not too_many_queues:
            assert result["err"] == "", (result["args"], result["err"][-3000:])
    sent = summary["sent"]

    assert TOPIC in topic_list["out"].split()
    route_body = json.loads(re.sub(r"\{(\d+):", r'{"\1":', route["out"]))
    assert route_body["brokerDatas"][0]["brokerAddrs"] == {"0": namesrv}
    assert route_body["queueDatas"][0]["readQueueNums"] == 2

    # topicStatus: each queue's max offset is what was sent to it.
    per_queue = {q: sum(1 for s in sent if s["queueId"] == q) for q in (0, 1)}
    rows = re.findall(r"^broker-a\s+(\d+)\s+(\d+)\s+(\d+)", status["out"], re.M)
    assert {int(q): int(high) for q, _, high in rows} == per_queue
    # The last update: when the queue's newest message was stored.
    assert (
        len(re.findall(r"^broker-a\s+\d+\s+\d+\s+\d+\s+\d{4}-\d\d-\d\d", status["out"], re.M)) == 2
    )

    assert f"create topic to {namesrv} success." in created["out"]
    assert '"readQueueNums":3' in fresh_route["out"].replace("\t", "").replace("\n", "")
    # A bad change is refused with the broker's sentence, and the topic keeps its queues.
    assert "queue count must be between 1 and 1024" in too_many_queues["err"]
    assert f"create subscription group to {namesrv} success." in sub_group["out"]

    # consumerProgress: the online consumer has consumed everything sent.
    rows = re.findall(rf"^{TOPIC}\s+broker-a\s+(\d+)\s+(\d+)\s+(\d+)", progress["out"], re.M)
    assert {int(q): (int(b), int(c)) for q, b, c in rows} == {
        q: (n, n) for q, n in per_queue.items()
    }
    assert "Consume Diff Total: 0" in progress["out"], progress["out"]
    # Each queue's last consumed message has a store time (the retry topic's rows, if the
    # consumer has committed there yet, have none: nothing was consumed there).
    last_times = re.findall(rf"^{TOPIC}\s+broker-a\s+.*\s(\S+ \S+|N/A)\s*$", progress["out"], re.M)
    assert len(last_times) == 2 and "N/A" not in last_times, progress["out"]

    assert "ConsumeType: CONSUME_PASSIVELY" in connection["out"]
    assert "MessageModel: CLUSTERING" in connection["out"]
    assert re.search(rf"^{TOPIC}\s+\*$", connection["out"], re.M)
    assert re.search(r"^\S+@\S+\s+127\.0\.0\.1:\d+\s+JAVA\s+V\d", connection["out"], re.M)

    # queryMsgById dials the address inside the offset message ID: the remoting port.
    first = sent[0]
    host = bytes.fromhex(first["offsetMsgId"][:16])
    assert f"{'.'.join(map(str, host[:4]))}:{int.from_bytes(host[4:], 'big')}" == namesrv
    assert re.search(rf"^Topic:\s+{TOPIC}$", by_id["out"], re.M)
    assert re.search(r"^Keys:\s+\[key-0\]$", by_id["out"], re.M)
    assert f"UNIQ_KEY={first['msgId']}" in by_id["out"]
    assert re.search(rf"^Store Host:\s+{re.escape(namesrv)}$", by_id["out"], re.M)
    assert first["msgId"] in by_key["out"]
    assert len(re.findall(r"^[0-9A-F]{32,}\s", by_key["out"], re.M)) == 1

    assert re.search(
        rf"DefaultCluster\s+broker-a\s+0\s+{re.escape(namesrv)}\s+Skiff", cluster["out"]
    )
    assert re.search(r"^brokerActive\s+:\s+true$", broker_status["out"], re.M)
    assert re.search(r"^brokerVersionDesc\s+:\s+Skiff", broker_status["out"], re.M)

    assert "delete topic [fresh] from cluster [DefaultCluster] success." in deleted["out"]
    assert "fresh" not in topic_list_after["out"].split()
    assert "fresh" not in topics

    # resetOffsetByTime to the start: both queues back to 0, and the online consumer
    # was told, so it read every message again.
    rows = re.findall(r"^broker-a\s+(\d+)\s+(\d+)\s*$", reset["out"], re.M)
    assert {int(q): int(o) for q, o in rows} == {0: 0, 1: 0}
    # (At least: a consumer may see a message twice, never fewer than all again.)
    assert summary["consumed"] >= 2 * MESSAGES, summary["consumed"]

    # Which groups consume each topic (QUERY_TOPIC_CONSUME_BY_WHO), per cluster.
    assert re.search(rf"^DefaultCluster\s+{TOPIC}\s+{GROUP}\s*$", topics_by_cluster["out"], re.M)
    assert re.search(
        rf"^{re.escape(namesrv)}\s+brokerActive\s+:\s+true$", status_by_cluster["out"], re.M
    )
    # consumerProgress with no group: one row per group, with its online members.
    assert re.search(rf"^{GROUP}\s+1\s+V\S+\s+PUSH\s+CLUSTERING\s", all_groups["out"], re.M)

    # updateSubGroup's settings are stored; setConsumeMode's mode is what an assignment says.
    assert f"create subscription group to {namesrv} success." in tuned_group["out"]
    assert tuned["retryMaxTimes"] == 3 and tuned["consumeEnable"] is False
    assert consume_mode["err"] == ""
    assert [a["mode"] for a in assigned["messageQueueAssignments"]] == ["POP"]


def test_mqadmin_signed_with_a_super_users_keys_works_with_auth_on(
    tmp_path: Path, mqadmin: JavaClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 2, 2))
    home = tmp_path / "rocketmq-home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "tools.yml").write_text("accessKey: root\nsecretKey: root-secret\n")
    auth = {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": "root:root-secret"}
    with running_broker(tmp_path, env=auth) as broker:
        namesrv = broker.remoting_endpoint
        n = ["-n", namesrv]
        signed = run_mqadmin(
            mqadmin,
            namesrv,
            tmp_path / "client-logs",
            [
                ["updateTopic", *n, "-b", namesrv, "-t", "guarded", "-r", "2", "-w", "2"],
                ["topicStatus", *n, "-t", "guarded"],
                ["brokerStatus", *n, "-b", namesrv],
            ],
            count=0,
            home=home,
        )
        unsigned = run_mqadmin(
            mqadmin,
            namesrv,
            tmp_path / "client-logs",
            [["updateTopic", *n, "-b", namesrv, "-t", "unguarded"]],
            count=0,
            home=tmp_path / "no-keys",
        )
    created, status, broker_status = signed["commands"]
    for result in signed["commands"]:
        assert result["err"] == "", (result["args"], result["err"][-3000:])
    assert f"create topic to {namesrv} success." in created["out"]
    assert len(re.findall(r"^broker-a\s+\d+\s+0\s+0", status["out"], re.M)) == 2
    assert re.search(r"^brokerActive\s+:\s+true$", broker_status["out"], re.M)
    # Without keys mqadmin signs nothing, and the broker refuses it (NO_PERMISSION, 16).
    (refused,) = unsigned["commands"]
    assert "CODE: 16" in refused["err"] and "success" not in refused["out"]


def test_consumer_status_and_a_direct_consume_are_asked_of_the_online_consumer(
    tmp_path: Path, mqadmin: JavaClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 2, 2))
    with running_broker(tmp_path) as broker:
        namesrv = broker.remoting_endpoint
        n = ["-n", namesrv]
        summary = run_mqadmin(
            mqadmin,
            namesrv,
            tmp_path / "client-logs",
            [
                # GET_CONSUMER_RUNNING_INFO, forwarded to the client and its answer back.
                ["consumerStatus", *n, "-g", GROUP, "-i", "{clientId}"],
                ["consumerStatus", *n, "-g", GROUP, "-i", "127.0.0.1@nobody"],
                # CONSUME_MESSAGE_DIRECTLY: the stored message handed to that consumer now.
                [
                    "queryMsgById",
                    *n,
                    "-t",
                    TOPIC,
                    "-i",
                    "{offsetMsgId0}",
                    "-g",
                    GROUP,
                    "-d",
                    "{clientId}",
                ],
            ],
            count=2,
            await_total=3,
        )
    online, absent, pushed = summary["commands"]
    assert online["err"] == "", online["err"][-3000:]
    # The client's own report: its group, its subscription and the queues it holds.
    out = online["out"]
    assert re.search(rf"^consumerGroup\s+:\s+{GROUP}$", out, re.M), out
    assert re.search(rf"Topic: {TOPIC}\s+ClassFilter: false\s+SubExpression: \*", out)
    held = re.findall(rf"^{TOPIC}\s+broker-a\s+(\d+)\s+ProcessQueueInfo", out, re.M)
    assert held == ["0", "1"]
    # A client not online: RocketMQ's sentence, at once.
    assert f"The Consumer <{GROUP}> <127.0.0.1@nobody> not online" in absent["err"]
    # The consumer's listener took it (two sends, and this one again) and said so.
    assert "consumeResult=CR_SUCCESS" in pushed["out"], pushed["err"][-3000:]
    assert summary["consumed"] >= 3
