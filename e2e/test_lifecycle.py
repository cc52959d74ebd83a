"""Install the chart on kind, run a broker with a replica, use it, break it, change it.

Run with ``e2e/run`` (it skips, saying why, where no Docker engine answers).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import yaml
from e2e.kind_cluster import IMAGE_TAG, ROOT, run
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

NAMESPACE = "skiff-e2e"


def kubectl(*args: str, input: str | None = None) -> str:
    return run("kubectl", "-n", NAMESPACE, *args, input=input)


def wait_ready(kind: str, name: str, timeout_s: float = 600) -> dict:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        obj = json.loads(kubectl("get", kind, name, "-o", "json"))
        for condition in obj.get("status", {}).get("conditions", []):
            if condition["type"] == "Ready" and condition["status"] == "True":
                return obj
        time.sleep(3)
    raise AssertionError(f"{kind} {name} not Ready: {kubectl('describe', kind, name)}")


@contextlib.contextmanager
def port_forward(target: str, remote_port: int) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        local_port = sock.getsockname()[1]
    process = subprocess.Popen(
        ["kubectl", "-n", NAMESPACE, "port-forward", target, f"{local_port}:{remote_port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", local_port), 1),
            ):
                break
            time.sleep(0.5)
        yield f"127.0.0.1:{local_port}"
    finally:
        process.terminate()
        process.wait()


def send(endpoint: str, topic: str, bodies: list[bytes]) -> None:
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    try:
        for body in bodies:
            message = Message()
            message.topic = topic
            message.body = body
            producer.send(message)  # returns once acknowledged
    finally:
        producer.shutdown()


def receive(endpoint: str, topic: str, group: str, count: int) -> list[bytes]:
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials()), group, {topic: FilterExpression()}, 5
    )
    consumer.startup()
    received: list[bytes] = []
    try:
        end = time.monotonic() + 120
        while len(received) < count and time.monotonic() < end:
            for message in consumer.receive(32, 30):
                received.append(message.body)
                consumer.ack(message)
    finally:
        consumer.shutdown()
    return received


def test_install_use_break_change_uninstall(kind_cluster: Path) -> None:
    run("kubectl", "create", "namespace", NAMESPACE)
    run(
        "helm", "install", "skiff", str(ROOT / "charts" / "skiff"), "-n", NAMESPACE, "--wait",
        "--set", f"operator.image.tag={IMAGE_TAG}",
        "--set", "operator.image.pullPolicy=Never",
        "--set", f"operator.brokerImage.tag={IMAGE_TAG}",
    )  # fmt: skip
    broker = yaml.safe_load((ROOT / "examples" / "broker.yaml").read_text())
    broker["spec"]["imagePullPolicy"] = "Never"
    broker["spec"]["storage"]["size"] = "1Gi"
    broker["spec"]["resources"] = {}
    broker["spec"]["settings"]["SKIFF_COMMIT_LOG_FILE_SIZE"] = "64m"
    kubectl("apply", "-f", "-", input=yaml.safe_dump(broker))
    kubectl("apply", "-f", str(ROOT / "examples" / "topic.yaml"))
    wait_ready("broker", "skiff")
    wait_ready("topic", "orders")

    bodies = [f"order {i}".encode() for i in range(200)]
    with port_forward("svc/skiff-a", 8081) as endpoint:
        send(endpoint, "orders", bodies)

    # Lose the master: everything acknowledged must still be there when it is back.
    kubectl("delete", "pod", "skiff-a-0", "--wait=false")
    kubectl("rollout", "status", "statefulset/skiff-a", "--timeout=600s")
    wait_ready("broker", "skiff")
    with port_forward("svc/skiff-a", 8081) as endpoint:
        assert sorted(receive(endpoint, "orders", "e2e", len(bodies))) == sorted(bodies)

    # A spec change rolls out: replicas first, then the master.
    before = kubectl("get", "statefulset", "skiff-a", "-o", "jsonpath={.status.updateRevision}")
    kubectl("patch", "broker", "skiff", "--type", "merge", "-p",
            json.dumps({"spec": {"flushType": "SYNC_FLUSH"}}))  # fmt: skip
    end = time.monotonic() + 120
    while time.monotonic() < end:
        revision = kubectl(
            "get", "statefulset", "skiff-a", "-o", "jsonpath={.status.updateRevision}"
        )
        if revision != before:
            break
        time.sleep(2)
    kubectl("rollout", "status", "statefulset/skiff-a", "--timeout=600s")
    wait_ready("broker", "skiff")

    kubectl("delete", "topics", "--all", "--timeout=120s")
    kubectl("delete", "broker", "skiff", "--timeout=300s")
    run("helm", "uninstall", "skiff", "-n", NAMESPACE, "--wait")
