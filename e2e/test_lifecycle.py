"""Skiff's chart, operator and brokers in real pods: install, use, break, change, uninstall.

Runs on the real node (``scripts/real-node``; never skipped in CI) and on kind (``e2e/run``).
Everything the user would notice is asserted: Broker and Topics Ready, every message the
official client had acknowledged still there after the master's pod is deleted and after its
broker process is SIGKILLed inside the running pod, a spec change rolled out replicas first
while the group keeps serving, a group added, the data claims kept after the Broker is gone,
and nothing but those claims left after ``helm uninstall``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import yaml
from e2e.clusters import IMAGE_TAG, ROOT, Cluster, run
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.waiting import wait_for

T = TypeVar("T")

WAIT_S = 600
# The longest pause between two looks at the cluster (each runs kubectl).
KUBECTL_PAUSE_S = 2.0
NO_FINALIZERS = '{"metadata": {"finalizers": null}}'
# A whole scenario (install to uninstall) takes minutes on a small node.
pytestmark = pytest.mark.timeout(1800)


class Namespace:
    """kubectl and helm in one namespace of the cluster."""

    def __init__(self, name: str) -> None:
        self.name = name
        # What the official clients sign with (the Broker enforces authentication).
        self.client_keys = Credentials()

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return run("kubectl", "-n", self.name, *args, input=input, check=check)

    def get(self, kind: str, name: str) -> dict:
        return json.loads(self.kubectl("get", kind, name, "-o", "json"))

    def wait_ready(self, kind: str, name: str) -> dict:
        def ready() -> dict | None:
            obj = self.get(kind, name)
            generation = obj["metadata"].get("generation")
            observed = obj.get("status", {}).get("observedGeneration", generation)
            for condition in obj.get("status", {}).get("conditions", []):
                if (
                    condition["type"] == "Ready"
                    and condition["status"] == "True"
                    and observed == generation
                ):
                    return obj
            return None

        try:
            return self.wait_until(f"{kind} {name} to be Ready", ready)
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}: {self.kubectl('describe', kind, name)}") from None

    def wait_until(self, what: str, done: Callable[[], T]) -> T:
        # Each look runs kubectl against the cluster: a few a second at most.
        return wait_for(done, what, deadline_s=WAIT_S, longest_pause_s=KUBECTL_PAUSE_S)

    @contextlib.contextmanager
    def port_forward(self, target: str, remote_port: int) -> Iterator[str]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            local_port = sock.getsockname()[1]
        # What kubectl says goes to a file: a pipe nobody reads could fill and stall it.
        with tempfile.TemporaryFile() as errors:
            forward = ["kubectl", "-n", self.name, "port-forward", target]
            process = subprocess.Popen(
                [*forward, f"{local_port}:{remote_port}"], stdout=subprocess.DEVNULL, stderr=errors
            )

            def forwarding() -> bool:
                if process.poll() is not None:
                    errors.seek(0)
                    said = errors.read().decode(errors="replace").strip()
                    raise AssertionError(
                        f"kubectl port-forward {target} exited ({process.returncode}): {said}"
                    )
                try:
                    with socket.create_connection(("127.0.0.1", local_port), 1):
                        return True
                except OSError:
                    return False

            try:
                wait_for(forwarding, f"kubectl port-forward {target} to accept on {local_port}")
                yield f"127.0.0.1:{local_port}"
            finally:
                process.terminate()
                process.wait()


def send(endpoint: str, topic: str, bodies: list[bytes], keys: Credentials) -> None:
    producer = Producer(ClientConfiguration(endpoint, keys), (topic,))
    producer.startup()
    try:
        for body in bodies:
            message = Message()
            message.topic = topic
            message.body = body
            producer.send(message)  # returns once acknowledged
    finally:
        producer.shutdown()


def receive(endpoint: str, topic: str, group: str, count: int, keys: Credentials) -> list[bytes]:
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, keys), group, {topic: FilterExpression()}, 5
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


class ProducerDuringRollout:
    """Sends one message after another until stopped, keeping those acknowledged.

    Sends fail while the group has no master; only the acknowledged ones must survive.
    """

    def __init__(self, endpoint: str, topic: str, keys: Credentials) -> None:
        self.acknowledged: set[bytes] = set()
        self.failed = 0
        self._stop = threading.Event()
        self._producer = Producer(ClientConfiguration(endpoint, keys), (topic,))
        self._topic = topic
        self._thread = threading.Thread(target=self._run, name="rollout-producer")

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            message = Message()
            message.topic = self._topic
            message.body = f"during rollout {index}".encode()
            index += 1
            try:
                self._producer.send(message)
            except Exception:
                self.failed += 1
                self._stop.wait(0.5)
            else:
                self.acknowledged.add(message.body)

    def __enter__(self) -> ProducerDuringRollout:
        self._producer.startup()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.shutdown()


def receive_all(
    endpoint: str, topic: str, group: str, wanted: set[bytes], keys: Credentials
) -> set[bytes]:
    """What ``group`` receives (and acks) until it has seen all of ``wanted``, or times out."""
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, keys), group, {topic: FilterExpression()}, 5
    )
    consumer.startup()
    received: set[bytes] = set()
    try:
        end = time.monotonic() + 120
        while not wanted <= received and time.monotonic() < end:
            for message in consumer.receive(32, 30):
                received.add(message.body)
                consumer.ack(message)
    finally:
        consumer.shutdown()
    return received


def round_trip(ns: Namespace, service: str, topic: str, label: str, count: int = 50) -> None:
    """The group behind ``service`` takes new messages and hands them back."""
    bodies = {f"{label} {i}".encode() for i in range(count)}
    with ns.port_forward(f"svc/{service}", 8081) as endpoint:
        send(endpoint, topic, sorted(bodies), ns.client_keys)
        missing = bodies - receive_all(endpoint, topic, f"e2e-{label}", bodies, ns.client_keys)
    assert not missing, f"{len(missing)} of {count} acknowledged messages not received"


def print_what_failed(ns: Namespace) -> None:
    """The namespace's objects, Leases, events and every container's log, for a failed test."""
    print(f"--- namespace {ns.name} after the failure ---")
    print(ns.kubectl("get", "all,leases,pvc", "-o", "wide", check=False))
    print(ns.kubectl("get", "leases", "-o", "yaml", check=False))
    print(ns.kubectl("get", "events", "--sort-by=.lastTimestamp", check=False))
    for pod in ns.kubectl("get", "pods", "-o", "name", check=False).split():
        for previous in ("--previous=true", "--previous=false"):
            print(f"--- {pod} {previous} ---")
            print(ns.kubectl("logs", pod, "--all-containers", previous, "--tail=300",
                             check=False))  # fmt: skip


@pytest.fixture
def ns(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Namespace]:
    """A fresh namespace; whatever a failed test left in it is printed, then removed."""
    namespace = Namespace(f"skiff-e2e-{uuid.uuid4().hex[:6]}")
    try:
        yield namespace
    finally:
        report = getattr(request.node, "call_report", None)
        if report is not None and report.failed:
            print_what_failed(namespace)
        if namespace.kubectl("get", "namespace", namespace.name, check=False):
            run("helm", "uninstall", "skiff", "-n", namespace.name, "--wait", check=False)
            for kind in ("users.skiff.io", "topics", "brokers"):
                names = namespace.kubectl("get", kind, "-o", "name", check=False).split()
                for name in names:
                    namespace.kubectl("patch", name, "--type", "merge", "-p",
                                      NO_FINALIZERS, check=False)  # fmt: skip
            run("kubectl", "delete", "namespace", namespace.name, "--wait=false", check=False)


def install_chart(ns: Namespace, cluster: Cluster, release: str) -> None:
    run("kubectl", "create", "namespace", ns.name)
    values = [
        "--set", f"operator.image.tag={IMAGE_TAG}",
        "--set", "operator.image.pullPolicy=Never",
        "--set", f"operator.brokerImage.tag={IMAGE_TAG}",
    ]  # fmt: skip
    if cluster.storage_class:
        # The class of the node's static local volumes, as a cluster admin would install it.
        values += ["--set", "localStorageClass.create=true",
                   "--set", f"localStorageClass.name={cluster.storage_class}"]  # fmt: skip
    run("helm", "install", release, str(ROOT / "charts" / "skiff"), "-n", ns.name, "--wait",
        "--timeout", "10m", *values)  # fmt: skip


def broker_manifest(cluster: Cluster, **spec: object) -> dict:
    broker = yaml.safe_load((ROOT / "examples" / "broker.yaml").read_text())
    broker["spec"]["imagePullPolicy"] = "Never"
    broker["spec"]["storage"]["size"] = "1Gi"
    if cluster.storage_class:
        broker["spec"]["storage"]["storageClassName"] = cluster.storage_class
    broker["spec"]["resources"] = {}
    broker["spec"]["settings"]["SKIFF_COMMIT_LOG_FILE_SIZE"] = "64m"
    broker["spec"].update(spec)
    return broker


def add_client_user(ns: Namespace) -> None:
    """The User of examples/user.yaml, also allowed to consume as the e2e* groups; the
    official clients sign with its keys (Brokers enforce authentication by default)."""
    user = yaml.safe_load((ROOT / "examples" / "user.yaml").read_text())
    user["spec"]["acl"].append({"resources": ["Group:e2e*"], "actions": ["Sub"]})
    ns.kubectl("apply", "-f", "-", input=yaml.safe_dump(user))
    ns.wait_ready("user", user["metadata"]["name"])
    data = ns.get("secret", f"{user['metadata']['name']}-credentials")["data"]
    keys = {key: base64.b64decode(value).decode() for key, value in data.items()}
    ns.client_keys = Credentials(keys["accessKey"], keys["secretKey"])


# Prints the uid and the errno of writing to the root filesystem (30: EROFS, read-only).
WRITE_PROBE = (
    "import os\n"
    "try:\n    open('/probe', 'w')\nexcept OSError as e:\n    print(os.getuid(), e.errno)"
)


def pod_uid(ns: Namespace, pod: str) -> str:
    return ns.get("pod", pod)["metadata"]["uid"]


def master_of(ns: Namespace, group: str) -> tuple[str, int]:
    """The pod holding the group's Lease (its master, whatever its ordinal) and the term."""
    lease = ns.get("lease", group)
    return lease["spec"].get("holderIdentity") or "", int(
        lease["metadata"].get("annotations", {}).get("skiff.io/epoch", "0")
    )


def in_sync_of(ns: Namespace, group: str) -> set[str]:
    """The pods the group's Lease names as holding every acknowledged write."""
    annotations = ns.get("lease", group)["metadata"].get("annotations", {})
    return set(json.loads(annotations.get("skiff.io/in-sync", "[]")))


def pods_ready(ns: Namespace, pods: tuple[str, ...]) -> bool:
    """Every pod exists and is Ready."""
    for pod in pods:
        found = ns.kubectl("get", "pod", pod, "-o", "json", check=False)
        if not found.startswith("{"):
            return False
        conditions = json.loads(found).get("status", {}).get("conditions", [])
        if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return False
    return True


def rolled_out(ns: Namespace, statefulset: str, pods: tuple[str, ...]) -> bool:
    """Every pod runs the StatefulSet's newest template and is Ready (the operator rolls it)."""
    revision = ns.get("statefulset", statefulset)["status"].get("updateRevision")
    for pod in pods:
        found = ns.kubectl("get", "pod", pod, "-o", "json", check=False)
        if not found.startswith("{"):
            return False
        labels = json.loads(found)["metadata"].get("labels", {})
        if labels.get("controller-revision-hash") != revision:
            return False
    return pods_ready(ns, pods)


def claims(ns: Namespace) -> set[str]:
    listed = json.loads(ns.kubectl("get", "pvc", "-o", "json"))
    return {item["metadata"]["name"] for item in listed["items"]}


def leftovers(ns: Namespace) -> list[str]:
    """Namespaced objects other than data claims and what Kubernetes puts in every namespace."""
    kinds = "all,configmaps,secrets,serviceaccounts,roles,rolebindings,poddisruptionbudgets"
    names = ns.kubectl("get", kinds, "-o", "name").split()
    built_in = {"configmap/kube-root-ca.crt", "serviceaccount/default"}
    return [name for name in names if name not in built_in]


def uninstall_keeps_only_claims(
    cluster: Cluster, ns: Namespace, release: str, kept: set[str]
) -> None:
    run("helm", "uninstall", release, "-n", ns.name, "--wait", "--timeout", "5m")
    ns.wait_until("the release's objects to go", lambda: not leftovers(ns))
    assert claims(ns) == kept
    cluster_wide = run("kubectl", "get", "clusterroles,clusterrolebindings", "-o", "name")
    assert f"/{release}-operator" not in cluster_wide
    if cluster.storage_class:
        assert cluster.storage_class not in run("kubectl", "get", "storageclasses", "-o", "name")


def test_install_use_break_change_uninstall(cluster: Cluster, ns: Namespace) -> None:
    install_chart(ns, cluster, "skiff")
    ns.kubectl("apply", "-f", "-", input=yaml.safe_dump(broker_manifest(cluster)))
    ns.kubectl("apply", "-f", str(ROOT / "examples" / "topic.yaml"))
    ns.wait_ready("broker", "skiff")
    ns.wait_ready("topic", "orders")
    ns.wait_ready("topic", "payments")
    add_client_user(ns)

    # Both images run as their non-root user on a read-only root filesystem.
    for target in ("skiff-a-0", "deploy/skiff-operator"):
        probe = ns.kubectl("exec", target, "--", "python3", "-c", WRITE_PROBE)
        assert probe.split() == ["10001", "30"], f"{target}: {probe!r}"

    bodies = [f"order {i}".encode() for i in range(200)]
    with ns.port_forward("svc/skiff-a", 8081) as endpoint:
        send(endpoint, "orders", bodies, ns.client_keys)

    # Lose the master once its replica holds every acknowledged write: the replica takes
    # the group's Lease in a new term, and everything acknowledged is still there. (A
    # replica the Lease does not name in sync never takes it; the master comes back.)
    pods = ("skiff-a-0", "skiff-a-1")
    ns.wait_until("the replica to be in sync", lambda: in_sync_of(ns, "skiff-a") == set(pods))
    master, epoch = master_of(ns, "skiff-a")
    assert master in pods, f"no master holds the group's Lease ({master!r})"
    uid = pod_uid(ns, master)
    ns.kubectl("delete", "pod", master, "--wait=false")
    ns.wait_until(
        "the replica to take over in a new term",
        lambda: (
            master_of(ns, "skiff-a")[0] not in ("", master) and master_of(ns, "skiff-a")[1] > epoch
        ),
    )
    ns.wait_until(
        "the deleted pod to come back",
        lambda: pods_ready(ns, pods) and pod_uid(ns, master) != uid,
    )
    ns.wait_ready("broker", "skiff")
    with ns.port_forward("svc/skiff-a", 8081) as endpoint:
        assert sorted(receive(endpoint, "orders", "e2e", len(bodies), ns.client_keys)) == sorted(
            bodies
        )

    # A spec change rolls out replicas first, then the master, with a producer writing all
    # along; every write acknowledged during the rollout is there afterwards.
    master, _ = master_of(ns, "skiff-a")
    (replica,) = (pod for pod in pods if pod != master)
    before = {pod: pod_uid(ns, pod) for pod in pods}
    revision = ns.get("statefulset", "skiff-a")["status"].get("updateRevision")
    with (
        ns.port_forward("svc/skiff-a", 8081) as endpoint,
        ProducerDuringRollout(endpoint, "orders", ns.client_keys) as producer,
    ):
        ns.kubectl("patch", "broker", "skiff", "--type", "merge", "-p",
                   json.dumps({"spec": {"flushType": "SYNC_FLUSH"}}))  # fmt: skip
        ns.wait_until(
            "the spec change to reach the StatefulSet",
            lambda: ns.get("statefulset", "skiff-a")["status"].get("updateRevision") != revision,
        )
        ns.wait_until("the operator to roll every pod", lambda: rolled_out(ns, "skiff-a", pods))
    ns.wait_ready("broker", "skiff")
    after = {pod: ns.get("pod", pod) for pod in before}
    assert all(after[pod]["metadata"]["uid"] != before[pod] for pod in before), "not restarted"
    assert (
        after[replica]["metadata"]["creationTimestamp"]
        <= after[master]["metadata"]["creationTimestamp"]
    ), "the master restarted before its replica"
    assert producer.acknowledged, f"no write acknowledged during the rollout ({producer.failed})"
    with ns.port_forward("svc/skiff-a", 8081) as endpoint:
        received = receive_all(
            endpoint, "orders", "e2e-rollout", producer.acknowledged, ns.client_keys
        )
    lost = producer.acknowledged - received
    assert not lost, f"{len(lost)} of {len(producer.acknowledged)} acknowledged writes lost"
    round_trip(ns, "skiff-a", "orders", "after-rollout")

    # The Broker goes; its data claims stay (deleteClaimsWithBroker is false).
    kept = claims(ns)
    assert kept == {"data-skiff-a-0", "data-skiff-a-1"}
    ns.kubectl("delete", "topics,users.skiff.io", "--all", "--timeout=120s")
    ns.kubectl("delete", "broker", "skiff", "--timeout=300s")
    ns.wait_until("the broker pods to go", lambda: not ns.kubectl("get", "pods", "-o", "name")
                  .count("skiff-a"))  # fmt: skip
    assert claims(ns) == kept
    uninstall_keeps_only_claims(cluster, ns, "skiff", kept)


def host_pid_of(cluster: Cluster, ns: Namespace, pod: str) -> int:
    """The host PID of the broker process in ``pod`` (its container's init)."""
    status = ns.get("pod", pod)["status"]["containerStatuses"][0]
    container_id = status["containerID"].removeprefix("containerd://")
    tasks = run("ctr", "--address", str(cluster.containerd_socket), "-n", "k8s.io",
                "tasks", "ls")  # fmt: skip
    for line in tasks.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == container_id:
            return int(fields[1])
    raise AssertionError(f"no running task for {pod}'s container {container_id}:\n{tasks}")


def restart_count(ns: Namespace, pod: str) -> int:
    return int(ns.get("pod", pod)["status"]["containerStatuses"][0]["restartCount"])


def test_two_sync_groups_survive_kills_and_grow(cluster: Cluster, ns: Namespace) -> None:
    if not cluster.is_real_node:
        pytest.skip("SIGKILLs a broker process by its host PID; only the real node exposes it")
    install_chart(ns, cluster, "skiff")
    broker = broker_manifest(cluster, groups=2, replicationMode="SYNC")
    ns.kubectl("apply", "-f", "-", input=yaml.safe_dump(broker))
    ns.kubectl("apply", "-f", str(ROOT / "examples" / "topic.yaml"))
    ns.wait_ready("broker", "skiff")
    topic = ns.wait_ready("topic", "orders")
    assert sorted(topic["status"]["groups"]) == ["a", "b"]
    add_client_user(ns)

    # Each group's Service is a way in; the cluster's routes spread the sends over both groups.
    sent: dict[str, list[bytes]] = {}
    for group in ("a", "b"):
        sent[group] = [f"{group} order {i}".encode() for i in range(100)]
        with ns.port_forward(f"svc/skiff-{group}", 8081) as endpoint:
            send(endpoint, "orders", sent[group], ns.client_keys)

    # SIGKILL group a's master process inside its running pod: the container restarts in the
    # same pod, on the same volume, and the group goes on under a new term of its Lease.
    master, epoch = master_of(ns, "skiff-a")
    restarts = restart_count(ns, master)
    uid = pod_uid(ns, master)
    os.kill(host_pid_of(cluster, ns, master), signal.SIGKILL)
    ns.wait_until("the killed broker to restart", lambda: restart_count(ns, master) > restarts)
    ns.kubectl("wait", "--for=condition=Ready", f"pod/{master}", "--timeout=600s")
    assert pod_uid(ns, master) == uid, "the pod was replaced, not its process restarted"
    ns.wait_until("a new term of group a's Lease", lambda: master_of(ns, "skiff-a")[1] > epoch)
    ns.wait_ready("broker", "skiff")
    # One access point: the bootstrap Service routes a consumer to the queues of both groups.
    every = {body for bodies in sent.values() for body in bodies}
    with ns.port_forward("svc/skiff", 8081) as endpoint:
        got = receive_all(endpoint, "orders", "e2e", every, ns.client_keys)
    lost = every - got
    assert not lost, f"{len(lost)} of {len(every)} acknowledged messages lost"

    # A third group: it comes up, the Topics reach it, and it serves.
    ns.kubectl("patch", "broker", "skiff", "--type", "merge", "-p",
               json.dumps({"spec": {"groups": 3}}))  # fmt: skip
    ns.wait_ready("broker", "skiff")
    ns.wait_until(
        "the topic to reach group c",
        lambda: sorted(ns.get("topic", "orders")["status"].get("groups", [])) == ["a", "b", "c"],
    )
    # Users are per group (replicated only within one): the client's User reaches the new
    # group's master the same way the Topic did.
    ns.wait_until(
        "the client's User to reach group c",
        lambda: ns.get("users.skiff.io", "billing")["status"].get("groups") == ["a", "b", "c"],
    )
    round_trip(ns, "skiff-c", "orders", "group-c")

    kept = claims(ns)
    assert len(kept) == 6
    ns.kubectl("delete", "topics,users.skiff.io", "--all", "--timeout=120s")
    ns.kubectl("delete", "broker", "skiff", "--timeout=300s")
    uninstall_keeps_only_claims(cluster, ns, "skiff", kept)


@contextlib.contextmanager
def relay(listen_host: str, target_port: int) -> Iterator[int]:
    """socat forwarding ``listen_host``:<port> to 127.0.0.1:``target_port``; yields the port."""
    with socket.socket() as sock:
        sock.bind((listen_host, 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        ["socat", f"TCP-LISTEN:{port},bind={listen_host},fork,reuseaddr",
         f"TCP:127.0.0.1:{target_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield port
    finally:
        process.terminate()
        process.wait()


def test_pods_export_spans_that_traces_analyze_reads(
    cluster: Cluster, ns: Namespace, tmp_path: Path
) -> None:
    if cluster.host_address is None:
        pytest.skip("the OTLP receiver runs on this machine; only the real node's pods reach it")
    with OtlpReceiver() as receiver, relay(cluster.host_address, receiver.port) as port:
        install_chart(ns, cluster, "skiff")
        telemetry = {"otlpEndpoint": f"http://{cluster.host_address}:{port}", "samplingRatio": 1}
        broker = broker_manifest(
            cluster, replicationMode="SYNC", flushType="SYNC_FLUSH", telemetry=telemetry
        )
        ns.kubectl("apply", "-f", "-", input=yaml.safe_dump(broker))
        ns.kubectl("apply", "-f", str(ROOT / "examples" / "topic.yaml"))
        ns.wait_ready("broker", "skiff")
        ns.wait_ready("topic", "orders")
        add_client_user(ns)
        bodies = [f"traced {i}".encode() for i in range(30)]
        with ns.port_forward("svc/skiff-a", 8081) as endpoint:
            send(endpoint, "orders", bodies, ns.client_keys)

        def appends() -> list:
            return [
                span
                for span in receiver.spans()
                if span.name == "skiff.store.append"
                and span.attributes.get("messaging.destination.name") == "orders"
            ]

        ns.wait_until("the pods' append spans", lambda: len(appends()) >= len(bodies))
        traces = receiver.write_traces_json(tmp_path / "otlp" / "traces.jsonl")

    done = subprocess.run(
        [sys.executable, "-m", "skiff_broker", "traces", "analyze", str(traces),
         "--output", str(tmp_path / "latency"), "--window", "10 minutes", "--json"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    rows = [
        row for row in report["overall"] if row["kind"] == "append" and row["topic"] == "orders"
    ]
    assert [(r["flush_type"], r["replication_mode"]) for r in rows] == [("SYNC_FLUSH", "SYNC")]
    assert rows[0]["count"] == len(appends()) and rows[0]["failures"] == 0
