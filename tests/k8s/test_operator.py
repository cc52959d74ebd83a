"""The operator against a real API server, running as the chart's own ServiceAccount.

The operator is a subprocess (``python -m skiff_operator``) whose kubeconfig holds a token
of the chart's ServiceAccount, issued through the TokenRequest API, with the chart's RBAC
applied from ``helm template``: anything it does beyond those rights fails here as it
would in a cluster.

No kubelet, scheduler or controller manager runs here, so no pod starts and no pod DNS
exists. The operator reaches a group's master through its injectable endpoint resolver
(``--broker-endpoint-template``), pointed at one local port where the tests start the
broker from the pod spec the operator stored. Every broker group therefore resolves to
that one broker; the tests that depend on it say so. Where the StatefulSet controller
would report ready pods, the test writes the StatefulSet status itself; where brokers
would hold their groups' Leases, the test writes the Leases as a broker does (with the
brokers' own ServiceAccount, so the rights the operator rendered are the ones used).

The tests of this module run in order and build on each other (one Broker, its Topics).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from tests.broker_process import BrokerProcess
from tests.kube_control_plane import (
    REPO_ROOT,
    ControlPlane,
    free_port,
    running_controllers,
    write_kubeconfig,
)

from skiff_broker.client.admin import AdminClient, Permission
from skiff_broker.client.errors import NotFound

NAMESPACE = "shop"
OPERATOR_NAMESPACE = "skiff-system"
BROKER = "orders"
DEADLINE_S = 90.0


def wait_for(condition: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    end = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def ready_condition(obj: dict | None) -> dict:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), {})


@contextlib.contextmanager
def operator_process(
    plane: ControlPlane, kubeconfig: Path, broker_port: int, log_path: Path
) -> Iterator[subprocess.Popen]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SKIFF_")},
        "KUBECONFIG": str(kubeconfig),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "skiff_operator",
                "--broker-endpoint-template", f"127.0.0.1:{broker_port}",
                "--status-interval", "1",
                "--topic-resync-interval", "2",
                "--retry-delay", "1",
                "--liveness", "",
                "--log-format", "json",
            ],
            env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class Cluster:
    """What the tests of this module share."""

    def __init__(self, plane: ControlPlane, work_dir: Path) -> None:
        self.plane = plane
        self.work_dir = work_dir
        self.broker_port = free_port()
        self.operator_log = work_dir / "operator.log"
        self.operator_kubeconfig = work_dir / "operator.kubeconfig"
        self.broker_process: BrokerProcess | None = None
        self._operator: contextlib.ExitStack | None = None

    def start_operator(self) -> None:
        self._operator = contextlib.ExitStack()
        self._operator.enter_context(
            operator_process(
                self.plane, self.operator_kubeconfig, self.broker_port, self.operator_log
            )
        )

    def stop_operator(self) -> None:
        """SIGTERM, as Kubernetes stops a pod."""
        if self._operator is not None:
            self._operator.close()
            self._operator = None

    def operator_log_text(self) -> str:
        return self.operator_log.read_text(errors="replace")[-5000:]

    def get(self, kind: str, name: str) -> dict | None:
        return self.plane.get(kind, name, NAMESPACE)

    def apply(self, *manifests: dict) -> None:
        self.plane.apply(list(manifests))

    def merge_patch(self, kind: str, name: str, patch: dict, subresource: str = "") -> None:
        args = ["patch", kind, name, "-n", NAMESPACE, "--type", "merge", "-p", json.dumps(patch)]
        if subresource:
            args += ["--subresource", subresource]
        self.plane.kubectl(*args)

    def delete(self, kind: str, *names: str) -> None:
        """Delete and wait until gone; the operator releases its finalizer."""
        result = self.plane.kubectl(
            "delete", kind, *names, "-n", NAMESPACE, "--timeout=120s", check=False
        )
        assert result.returncode == 0, (
            f"deleting {kind} {' '.join(names)} failed: {result.stderr}\n"
            f"operator log:\n{self.operator_log_text()}"
        )

    def wait_ready(self, kind: str, name: str, status: str, reason: str = "") -> dict:
        def matches() -> dict | None:
            obj = self.get(kind, name)
            condition = ready_condition(obj)
            generation = (obj or {}).get("metadata", {}).get("generation")
            if (
                condition.get("status") == status
                and (not reason or condition.get("reason") == reason)
                and condition.get("observedGeneration") == generation
            ):
                return obj
            return None

        try:
            return wait_for(matches, f"{kind} {name} Ready={status} {reason}")
        except AssertionError:
            current = ready_condition(self.get(kind, name))
            raise AssertionError(
                f"{kind} {name} never became Ready={status} {reason}; it is {current}\n"
                f"operator log:\n{self.operator_log_text()}"
            ) from None


@pytest.fixture(scope="module")
def cluster(crds: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work_dir = tmp_path_factory.mktemp("operator")
    shared = Cluster(crds, work_dir)
    crds.kubectl("create", "namespace", OPERATOR_NAMESPACE)
    crds.kubectl("create", "namespace", NAMESPACE)
    rbac = crds.helm(
        "template", "skiff", str(REPO_ROOT / "charts" / "skiff"),
        "--namespace", OPERATOR_NAMESPACE,
        "--show-only", "templates/serviceaccount.yaml",
        "--show-only", "templates/rbac.yaml",
    )  # fmt: skip
    crds.kubectl("apply", "-f", "-", input=rbac)
    # A token of the chart's ServiceAccount, issued by the TokenRequest API.
    token = crds.kubectl(
        "create", "token", "skiff-operator", "-n", OPERATOR_NAMESPACE, "--duration", "2h"
    ).stdout.strip()
    write_kubeconfig(shared.operator_kubeconfig, crds.server, crds.ca_path, token, "skiff-operator")
    shared.start_operator()
    try:
        yield shared
    finally:
        shared.stop_operator()
        if shared.broker_process is not None:
            shared.broker_process.kill()


def test_the_operator_identity_has_only_what_it_needs(cluster: Cluster) -> None:
    def can(*args: str) -> str:
        result = cluster.plane.kubectl(
            "auth", "can-i", *args, "-n", NAMESPACE,
            kubeconfig=cluster.operator_kubeconfig, check=False,
        )  # fmt: skip
        return result.stdout.strip()

    assert can("patch", "statefulsets.apps") == "yes"
    assert can("patch", "brokers.skiff.io/status") == "yes"
    assert can("watch", "leases.coordination.k8s.io") == "yes"
    assert can("create", "roles.rbac.authorization.k8s.io") == "yes"
    assert can("delete", "pods") == "yes"
    assert can("list", "nodes") == "yes"
    assert can("create", "networkpolicies.networking.k8s.io") == "yes"
    assert can("delete", "networkpolicies.networking.k8s.io") == "yes"
    assert can("escalate", "networkpolicies.networking.k8s.io") == "no"
    assert can("get", "secrets") == "no"
    assert can("create", "secrets") == "yes"
    assert can("create", "pods") == "no"
    assert can("delete", "leases.coordination.k8s.io") == "no"
    assert can("escalate", "roles.rbac.authorization.k8s.io") == "no"
    assert can("bind", "roles.rbac.authorization.k8s.io") == "no"
    assert can("delete", "brokers.skiff.io") == "no"
    assert can("delete", "persistentvolumeclaims") == "no"


def broker_manifest(**spec: Any) -> dict:
    return {
        "apiVersion": "skiff.io/v1alpha1",
        "kind": "Broker",
        "metadata": {"name": BROKER, "namespace": NAMESPACE},
        "spec": {
            "groups": 1,
            "replicasPerGroup": 2,
            # Small segments: the broker started from this spec runs on a test machine.
            "settings": {"SKIFF_COMMIT_LOG_FILE_SIZE": "8m"},
            **spec,
        },
    }


def test_a_broker_gets_its_children_owned_by_it(cluster: Cluster) -> None:
    cluster.apply(broker_manifest())
    stateful_set = wait_for(lambda: cluster.get("statefulset", f"{BROKER}-a"), "the StatefulSet")
    broker = cluster.get("broker", BROKER)
    assert broker is not None
    uid = broker["metadata"]["uid"]
    children = [
        ("statefulset", f"{BROKER}-a"),
        ("service", f"{BROKER}-a"),
        ("service", f"{BROKER}-a-pods"),
        ("configmap", f"{BROKER}-a-settings"),
        ("poddisruptionbudget", f"{BROKER}-a"),
        ("networkpolicy", f"{BROKER}-a"),
        ("serviceaccount", f"{BROKER}-broker"),
        ("role", f"{BROKER}-broker"),
        ("rolebinding", f"{BROKER}-broker"),
        ("service", BROKER),
        ("configmap", f"{BROKER}-endpoints"),
        ("secret", f"{BROKER}-replication"),
    ]
    for kind, name in children:
        child = wait_for(lambda kind=kind, name=name: cluster.get(kind, name), f"{kind} {name}")
        (owner,) = child["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Broker", BROKER, uid)
        assert owner["controller"] is True
    assert stateful_set["spec"]["replicas"] == 2
    shown = cluster.plane.kubectl(
        "get", "statefulset", f"{BROKER}-a", "-n", NAMESPACE, "-o", "json",
        "--show-managed-fields",
    ).stdout  # fmt: skip
    managers = {m["manager"] for m in json.loads(shown)["metadata"]["managedFields"]}
    assert "skiff-operator" in managers

    broker = cluster.wait_ready("broker", BROKER, "False", "PodsNotReady")
    status = broker["status"]
    assert status["observedGeneration"] == 1
    # One endpoint for the whole cluster: the bootstrap Service over every broker.
    assert status["clientEndpoint"] == f"{BROKER}.{NAMESPACE}.svc.cluster.local:8081"
    assert status["groups"][0]["serviceEndpoint"] == (
        f"{BROKER}-a.{NAMESPACE}.svc.cluster.local:8081"
    )
    assert status["groups"][0]["master"] == ""
    pod = stateful_set["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{BROKER}-broker"
    assert stateful_set["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert status["groups"][0]["readyReplicas"] == 0
    assert "0/2 pods ready" in ready_condition(broker)["message"]
    printed = cluster.plane.kubectl("get", "skb", BROKER, "-n", NAMESPACE).stdout
    assert "PodsNotReady" in printed


def report_pods(cluster: Cluster, ready: int, updated: int) -> None:
    """What the StatefulSet controller would report; none runs in this module.

    Under OnDelete it never moves currentRevision, even once every pod is updated.
    """
    stateful_set = cluster.get("statefulset", f"{BROKER}-a")
    assert stateful_set is not None
    generation = stateful_set["metadata"]["generation"]
    status = {
        "replicas": 2,
        "readyReplicas": ready,
        "updatedReplicas": updated,
        "currentReplicas": 2,
        "availableReplicas": ready,
        "observedGeneration": generation,
        "currentRevision": f"{BROKER}-a-old",
        "updateRevision": f"{BROKER}-a-{generation}",
    }
    cluster.merge_patch("statefulset", f"{BROKER}-a", {"status": status}, subresource="status")


BROKER_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{BROKER}-broker"


def test_the_brokers_account_may_do_exactly_what_the_contract_says(cluster: Cluster) -> None:
    def can(verb: str, resource: str, namespace: str = NAMESPACE) -> str:
        result = cluster.plane.kubectl(
            "auth", "can-i", verb, resource, "-n", namespace, "--as", BROKER_ACCOUNT,
            check=False,
        )  # fmt: skip
        return result.stdout.strip()

    allowed = {
        "leases.coordination.k8s.io": {"get", "list", "watch", "create", "update", "patch"},
        "pods": {"get", "patch"},
        "configmaps": {"get", "list", "watch"},
    }
    verbs = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
    for resource, granted in allowed.items():
        for verb in verbs:
            expected = "yes" if verb in granted else "no"
            assert can(verb, resource) == expected, f"{verb} {resource}"
    for verb, resource in (
        ("get", "secrets"),
        ("create", "pods"),
        ("patch", "statefulsets.apps"),
        ("patch", "services"),
        ("get", "brokers.skiff.io"),
    ):
        assert can(verb, resource) == "no", f"{verb} {resource}"
    # Namespaced: nothing in any other namespace.
    assert can("get", "leases.coordination.k8s.io", OPERATOR_NAMESPACE) == "no"


def micro_time(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_lease(
    cluster: Cluster,
    group: str,
    holder: str,
    epoch: int,
    in_sync: list[str],
    endpoint: str,
    renewed: datetime.datetime | None = None,
    duration_s: int = 3600,
) -> None:
    """A group's Lease as its master writes it, with the brokers' own account.

    The duration is long so that the test never depends on how fast it runs; a Lease
    that ran out is written with an old renew time instead.
    """
    renewed = renewed or datetime.datetime.now(datetime.UTC)
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": f"{BROKER}-{group}",
            "namespace": NAMESPACE,
            "labels": {"skiff.io/cluster": BROKER, "skiff.io/group": f"{BROKER}-{group}"},
            "annotations": {
                "skiff.io/epoch": str(epoch),
                "skiff.io/endpoint": endpoint,
                "skiff.io/ha-address": endpoint.replace(":8081", ":10912"),
                "skiff.io/in-sync": json.dumps(in_sync),
                "skiff.io/replicas": json.dumps({}),
            },
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_s,
            "acquireTime": micro_time(renewed),
            "renewTime": micro_time(renewed),
            "leaseTransitions": epoch,
        },
    }
    cluster.plane.kubectl(
        "apply", "--as", BROKER_ACCOUNT, "-f", "-", input=json.dumps(lease)
    )  # fmt: skip


def group_status(cluster: Cluster, suffix: str) -> dict:
    broker = cluster.get("broker", BROKER) or {}
    groups = (broker.get("status") or {}).get("groups") or []
    return next((g for g in groups if g["name"] == suffix), {})


def test_ready_needs_the_pods_and_a_master_holding_the_lease(cluster: Cluster) -> None:
    report_pods(cluster, ready=2, updated=2)
    # Every pod is ready, but no broker holds the group's Lease yet: no master.
    broker = cluster.wait_ready("broker", BROKER, "False", "NoMaster")
    assert f"no broker holds its Lease {BROKER}-a" in ready_condition(broker)["message"]

    write_lease(cluster, "a", f"{BROKER}-a-1", 3, [f"{BROKER}-a-1", f"{BROKER}-a-0"],
                "10.0.0.7:8081")  # fmt: skip
    broker = cluster.wait_ready("broker", BROKER, "True", "Ready")
    (group,) = broker["status"]["groups"]
    assert group["readyReplicas"] == 2
    assert (group["master"], group["epoch"], group["endpoint"]) == (
        f"{BROKER}-a-1",
        3,
        "10.0.0.7:8081",
    )
    assert group["inSync"] == [f"{BROKER}-a-0", f"{BROKER}-a-1"]
    printed = cluster.plane.kubectl("get", "skb", BROKER, "-n", NAMESPACE, "-o", "wide").stdout
    assert f"{BROKER}.{NAMESPACE}.svc.cluster.local:8081" in printed
    header, row = printed.splitlines()[:2]
    assert row.split()[header.split().index("MASTERS")] == f"a={BROKER}-a-1"

    # A holder that stopped renewing is no master any more, though its term stays known.
    stale = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    write_lease(cluster, "a", f"{BROKER}-a-1", 3, [f"{BROKER}-a-1"], "10.0.0.7:8081",
                renewed=stale, duration_s=15)  # fmt: skip
    cluster.wait_ready("broker", BROKER, "False", "NoMaster")
    group = group_status(cluster, "a")
    assert (group["master"], group["epoch"]) == ("", 3)
    assert (cluster.get("broker", BROKER) or {})["status"]["masters"] == "a=-"

    # A replica took over: a new holder, the next term.
    write_lease(cluster, "a", f"{BROKER}-a-0", 4, [f"{BROKER}-a-0", f"{BROKER}-a-1"],
                "10.0.0.6:8081")  # fmt: skip
    broker = cluster.wait_ready("broker", BROKER, "True", "Ready")
    (group,) = broker["status"]["groups"]
    assert (group["master"], group["epoch"], group["endpoint"]) == (
        f"{BROKER}-a-0",
        4,
        "10.0.0.6:8081",
    )


def test_a_spec_change_rolls_out(cluster: Cluster) -> None:
    def settings_hash() -> str:
        stateful_set = cluster.get("statefulset", f"{BROKER}-a")
        assert stateful_set is not None
        return stateful_set["spec"]["template"]["metadata"]["annotations"]["skiff.io/settings-hash"]

    def replication_secret() -> str:
        secret = cluster.get("secret", f"{BROKER}-replication")
        assert secret is not None, "every Broker has its replication secret"
        return secret["data"]["secret"]

    before = settings_hash()
    kept = replication_secret()
    assert len(base64.b64decode(base64.b64decode(kept))) == 32
    cluster.merge_patch("broker", BROKER, {"spec": {"flushType": "SYNC_FLUSH"}})
    wait_for(
        lambda: (
            (cluster.get("configmap", f"{BROKER}-a-settings") or {})
            .get("data", {})
            .get("SKIFF_FLUSH_TYPE")
            == "SYNC_FLUSH"
        ),
        "the ConfigMap to carry the new flush type",
    )
    wait_for(lambda: settings_hash() != before, "a new settings hash on the pod template")
    # The StatefulSet has a new template the controller has not rolled out yet.
    broker = cluster.wait_ready("broker", BROKER, "False", "RollingOut")
    assert broker["metadata"]["generation"] == 2
    assert broker["status"]["observedGeneration"] == 2
    # The highest ordinal restarts first: the replica is updated, the master not yet.
    report_pods(cluster, ready=2, updated=1)
    wait_for(
        lambda: (
            ready_condition(cluster.get("broker", BROKER)).get("message")
            == "group a: 1/2 pods updated"
        ),
        "the Broker to report the rollout's progress",
    )
    report_pods(cluster, ready=2, updated=2)
    cluster.wait_ready("broker", BROKER, "True", "Ready")
    # Reconciled again, yet the secret the running pods hold is the same.
    assert replication_secret() == kept


def broker_pod(name: str, revision: str) -> dict:
    """A pod of group a as the StatefulSet controller would create it (never scheduled)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                "skiff.io/broker": BROKER,
                "skiff.io/group": "a",
                "controller-revision-hash": revision,
            },
        },
        "spec": {
            "serviceAccountName": f"{BROKER}-broker",
            "automountServiceAccountToken": False,
            "containers": [{"name": "broker", "image": "skiff/broker:test"}],
        },
    }


def make_ready(cluster: Cluster, name: str) -> None:
    """What kubelet reports once the pod's readiness probe passes."""
    condition = {"type": "Ready", "status": "True", "lastTransitionTime": None}
    cluster.merge_patch("pod", name, {"status": {"conditions": [condition]}}, "status")


def test_a_new_template_restarts_the_replicas_before_the_master(cluster: Cluster) -> None:
    """The master is ordinal 1 here: the StatefulSet's own order would restart it first."""
    stateful_set = cluster.get("statefulset", f"{BROKER}-a")
    assert stateful_set is not None
    old = f"{BROKER}-a-{stateful_set['metadata']['generation']}"
    master, replica = f"{BROKER}-a-1", f"{BROKER}-a-0"
    for name in (replica, master):
        cluster.apply(broker_pod(name, old))
        make_ready(cluster, name)
    # Only the master is in sync yet: it must not restart until a replica is.
    write_lease(cluster, "a", master, 5, [master], "10.0.0.7:8081")
    cluster.merge_patch("broker", BROKER, {"spec": {"defaultWriteQueues": 4}})
    generation = wait_for(
        lambda: (
            (s := cluster.get("statefulset", f"{BROKER}-a"))
            and s["metadata"]["generation"] > stateful_set["metadata"]["generation"]
            and s["metadata"]["generation"]
        ),
        "the new pod template",
    )
    new = f"{BROKER}-a-{generation}"
    status = {
        "replicas": 2,
        "readyReplicas": 2,
        "updatedReplicas": 0,
        "currentReplicas": 2,
        "availableReplicas": 2,
        "observedGeneration": generation,
        "currentRevision": old,
        "updateRevision": new,
    }
    cluster.merge_patch("statefulset", f"{BROKER}-a", {"status": status}, subresource="status")

    wait_for(lambda: cluster.get("pod", replica) is None, "the replica to be restarted")
    assert cluster.get("pod", master) is not None, "the master went before its replica"
    # The controller brings the replica back on the new template; it is ready.
    cluster.apply(broker_pod(replica, new))
    make_ready(cluster, replica)
    status.update(updatedReplicas=1)
    cluster.merge_patch("statefulset", f"{BROKER}-a", {"status": status}, subresource="status")
    wait_for(
        lambda: (
            "restarts once a replica is in its in-sync set"
            in ready_condition(cluster.get("broker", BROKER)).get("message", "")
        ),
        "the operator to wait for an in-sync replica",
    )
    assert cluster.get("pod", master) is not None
    # The replica caught up: the master may go, and the Lease can pass to the replica.
    write_lease(cluster, "a", master, 5, [master, replica], "10.0.0.7:8081")
    wait_for(lambda: cluster.get("pod", master) is None, "the master to be restarted last")

    cluster.delete("pod", replica)
    report_pods(cluster, ready=2, updated=2)
    cluster.wait_ready("broker", BROKER, "True", "Ready")


def substitute(value: str, env: dict[str, str]) -> str:
    """$(VAR) expansion as kubelet does it: defined names only, $$ escapes."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        value,
    )


def start_broker_from_stored_pod_spec(cluster: Cluster) -> BrokerProcess:
    """Run the group's master as its pod would, from the objects stored in the API server."""
    stateful_set = cluster.get("statefulset", f"{BROKER}-a")
    assert stateful_set is not None
    pod = stateful_set["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        config_map = cluster.get("configmap", source["configMapRef"]["name"])
        assert config_map is not None
        env.update(config_map["data"])
    # The downward API values kubelet would give pod 0 of the StatefulSet.
    downward = {
        "metadata.name": f"{BROKER}-a-0",
        "metadata.namespace": NAMESPACE,
        "status.podIP": "127.0.0.1",
    }
    for entry in container["env"]:
        source = entry.get("valueFrom", {})
        if "secretKeyRef" in source:
            secret = cluster.get("secret", source["secretKeyRef"]["name"])
            assert secret is not None
            value = secret["data"][source["secretKeyRef"]["key"]]
            env[entry["name"]] = base64.b64decode(value).decode()
        elif "fieldRef" in source:
            env[entry["name"]] = downward[source["fieldRef"]["fieldPath"]]
        else:
            env[entry["name"]] = substitute(entry["value"], env)
    # The pod's volume becomes a temp directory; its network a loopback port.
    data_dir = cluster.work_dir / "pod-data"
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "data"]
    env = {k: v.replace(mount["mountPath"], str(data_dir)) for k, v in env.items()}
    container_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "grpc")
    assert env["SKIFF_LISTEN"] == f"0.0.0.0:{container_port}"
    env["SKIFF_LISTEN"] = f"127.0.0.1:{cluster.broker_port}"
    env["SKIFF_ADVERTISE"] = env["SKIFF_ADVERTISE"].replace(
        f":{container_port}", f":{cluster.broker_port}"
    )
    # The pod's own metrics port, here on a shared machine: a free one.
    assert env["SKIFF_METRICS_LISTEN"] == "0.0.0.0:5557"
    env["SKIFF_METRICS_LISTEN"] = "127.0.0.1:0"
    # The pod's broker elects its master through the group's Lease; the election is the
    # broker's and is tested with broker processes holding real Leases. Here the broker
    # stands for the elected master the operator talks to.
    assert env["SKIFF_ROLE"] == "LEASE"
    env["SKIFF_ROLE"] = "MASTER"
    # The image puts the installed console scripts on PATH; so does this venv.
    bin_dir = Path(sys.executable).parent
    command = [str(bin_dir / container["command"][0]), *container["command"][1:]]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SKIFF_", "OTEL_"))}
    log_path = cluster.work_dir / "pod-broker.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*command, *container["args"]],
            env={**base, "PATH": f"{bin_dir}{os.pathsep}{base.get('PATH', '')}", **env},
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    broker = BrokerProcess(process, data_dir, log_path)
    try:
        wait_for(
            lambda: (
                process.poll() is not None
                or any(r.get("msg", "").startswith("listening on ") for r in broker.log_lines())
            ),
            "the broker to listen",
        )
    except AssertionError:
        process.kill()
        raise
    assert process.poll() is None, f"the broker exited:\n{broker.log()[-3000:]}"
    broker.endpoint = f"127.0.0.1:{cluster.broker_port}"
    return broker


def topic_manifest(name: str, **spec: Any) -> dict:
    return {
        "apiVersion": "skiff.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"brokerRef": {"name": BROKER}, **spec},
    }


def send(endpoint: str, topic: str, bodies: list[bytes]) -> None:
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    try:
        for body in bodies:
            message = Message()
            message.topic = topic
            message.body = body
            producer.send(message)
    finally:
        producer.shutdown()


def receive(endpoint: str, topic: str, group: str, count: int) -> list[bytes]:
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials()), group, {topic: FilterExpression()}, 2
    )
    consumer.startup()
    received: list[bytes] = []
    try:
        end = time.monotonic() + DEADLINE_S
        while len(received) < count and time.monotonic() < end:
            for message in consumer.receive(32, 30):
                received.append(message.body)
                consumer.ack(message)
    finally:
        consumer.shutdown()
    return received


def test_a_topic_waits_for_an_unreachable_broker(cluster: Cluster) -> None:
    # Nothing listens on the resolved endpoint yet: the pods have not started.
    cluster.apply(topic_manifest("early", readQueues=2, writeQueues=2))
    topic = cluster.wait_ready("topic", "early", "False", "BrokerUnavailable")
    assert "the master of group a at 127.0.0.1:" in ready_condition(topic)["message"]
    assert topic["metadata"]["finalizers"] == ["skiff.io/finalizer"]


def test_the_stored_pod_spec_boots_a_broker_and_a_topic_works(cluster: Cluster) -> None:
    cluster.broker_process = broker = start_broker_from_stored_pod_spec(cluster)
    # The waiting Topic is retried and lands once the broker answers.
    cluster.wait_ready("topic", "early", "True", "Reconciled")
    with AdminClient(broker.endpoint) as admin:
        info = admin.broker_info()
    # The settings the operator rendered reached the broker.
    assert info.broker_name == f"{BROKER}-a"
    assert info.flush_type == "SYNC_FLUSH"

    cluster.apply(topic_manifest("events", topicName="OrderEvents", readQueues=4, writeQueues=4))
    topic = cluster.wait_ready("topic", "events", "True", "Reconciled")
    assert topic["status"]["groups"] == ["a"]
    assert (topic["status"]["readQueues"], topic["status"]["writeQueues"]) == (4, 4)
    with AdminClient(broker.endpoint) as admin:
        stored = admin.get_topic("OrderEvents")
    assert (stored.read_queues, stored.write_queues) == (4, 4)

    bodies = [f"order {i}".encode() for i in range(5)]
    send(broker.endpoint, "OrderEvents", bodies)
    assert sorted(receive(broker.endpoint, "OrderEvents", "billing", len(bodies))) == sorted(bodies)


def test_topic_changes_follow_the_safe_order(cluster: Cluster) -> None:
    endpoint = f"127.0.0.1:{cluster.broker_port}"
    cluster.apply(topic_manifest("shrinking", readQueues=8, writeQueues=8))
    cluster.wait_ready("topic", "shrinking", "True", "Reconciled")
    bodies = [f"pending {i}".encode() for i in range(32)]
    send(endpoint, "shrinking", bodies)

    cluster.merge_patch("topic", "shrinking", {"spec": {"readQueues": 2, "writeQueues": 2}})
    topic = cluster.wait_ready("topic", "shrinking", "False", "Draining")
    # Writes shrank first; reads wait for the queues no longer written to drain.
    assert (topic["status"]["readQueues"], topic["status"]["writeQueues"]) == (8, 2)
    assert "holds" in ready_condition(topic)["message"]
    with AdminClient(endpoint) as admin:
        stored = admin.get_topic("shrinking")
    assert (stored.read_queues, stored.write_queues) == (8, 2)

    assert len(receive(endpoint, "shrinking", "drainers", len(bodies))) == len(bodies)
    topic = cluster.wait_ready("topic", "shrinking", "True", "Reconciled")
    assert (topic["status"]["readQueues"], topic["status"]["writeQueues"]) == (2, 2)

    cluster.merge_patch("topic", "shrinking", {"spec": {"readQueues": 6, "writeQueues": 6}})
    topic = cluster.wait_ready("topic", "shrinking", "True", "Reconciled")
    assert (topic["status"]["readQueues"], topic["status"]["writeQueues"]) == (6, 6)


def test_a_broker_refusal_shows_in_the_topic_status(cluster: Cluster) -> None:
    # The broker keeps some topic names for itself; it answers INVALID_ARGUMENT.
    cluster.apply(topic_manifest("reserved", topicName="SCHEDULE_TOPIC_XXXX"))
    topic = cluster.wait_ready("topic", "reserved", "False", "Invalid")
    assert "belongs to the broker" in ready_condition(topic)["message"]


def test_deleting_a_topic_deletes_it_on_the_brokers_unless_retained(cluster: Cluster) -> None:
    endpoint = f"127.0.0.1:{cluster.broker_port}"
    cluster.apply(topic_manifest("kept", deletionPolicy="Retain"))
    cluster.apply(topic_manifest("dropped"))
    cluster.wait_ready("topic", "kept", "True", "Reconciled")
    cluster.wait_ready("topic", "dropped", "True", "Reconciled")
    cluster.delete("topic", "kept", "dropped")
    assert cluster.get("topic", "dropped") is None
    with AdminClient(endpoint) as admin:
        assert admin.get_topic("kept").name == "kept"
        with pytest.raises(NotFound):
            admin.get_topic("dropped")


def test_a_topic_of_a_missing_broker_says_so_and_deletes_freely(cluster: Cluster) -> None:
    orphan = topic_manifest("orphan")
    orphan["spec"]["brokerRef"]["name"] = "nowhere"
    cluster.apply(orphan)
    topic = cluster.wait_ready("topic", "orphan", "False", "BrokerNotFound")
    assert "Broker 'nowhere' does not exist" in ready_condition(topic)["message"]
    cluster.delete("topic", "orphan")
    assert cluster.get("topic", "orphan") is None


def test_a_child_the_api_server_refuses_shows_in_the_broker_status(cluster: Cluster) -> None:
    # The CRD passes resources through; the StatefulSet validation refuses this quantity.
    faulty = broker_manifest(resources={"limits": {"memory": "plenty"}})
    faulty["metadata"]["name"] = "faulty"
    cluster.apply(faulty)
    broker = cluster.wait_ready("broker", "faulty", "False", "ApplyFailed")
    assert "quantities must match the regular expression" in ready_condition(broker)["message"]
    assert cluster.get("statefulset", "faulty-a") is None
    # Fixing the spec clears it.
    cluster.merge_patch("broker", "faulty", {"spec": {"resources": {"limits": {"memory": "1Gi"}}}})
    cluster.wait_ready("broker", "faulty", "False", "PodsNotReady")
    assert cluster.get("statefulset", "faulty-a") is not None
    cluster.delete("broker", "faulty")


def test_a_broker_named_like_another_brokers_group_is_refused(cluster: Cluster) -> None:
    # The bootstrap Service "orders-a" would be the client Service of group a of "orders".
    clash = broker_manifest()
    clash["metadata"]["name"] = f"{BROKER}-a"
    cluster.apply(clash)
    broker = cluster.wait_ready("broker", f"{BROKER}-a", "False", "ApplyFailed")
    message = ready_condition(broker)["message"]
    assert f"Service {BROKER}-a belongs to Broker {BROKER}" in message
    service = cluster.get("service", f"{BROKER}-a")
    assert service is not None
    assert service["spec"]["selector"]["skiff.io/group"] == "a"
    assert [o["name"] for o in service["metadata"]["ownerReferences"]] == [BROKER]
    cluster.delete("broker", f"{BROKER}-a")


def test_an_operator_restart_resumes(cluster: Cluster) -> None:
    """A change made while the operator is down is rolled out when it comes back."""
    cluster.stop_operator()
    cluster.merge_patch("broker", BROKER, {"spec": {"defaultReadQueues": 16}})
    cluster.merge_patch("topic", "events", {"spec": {"readQueues": 6}})
    cluster.start_operator()
    wait_for(
        lambda: (
            (cluster.get("configmap", f"{BROKER}-a-settings") or {})
            .get("data", {})
            .get("SKIFF_DEFAULT_READ_QUEUES")
            == "16"
        ),
        "the restarted operator to render the change",
    )
    topic = cluster.wait_ready("topic", "events", "True", "Reconciled")
    assert topic["status"]["readQueues"] == 6
    with AdminClient(f"127.0.0.1:{cluster.broker_port}") as admin:
        assert admin.get_topic("OrderEvents").read_queues == 6


def test_scaling_out_adds_a_group_and_scaling_in_waits_for_its_messages(cluster: Cluster) -> None:
    endpoint = f"127.0.0.1:{cluster.broker_port}"
    cluster.merge_patch("broker", BROKER, {"spec": {"groups": 2}})
    wait_for(lambda: cluster.get("statefulset", f"{BROKER}-b"), "the second group's StatefulSet")
    wait_for(lambda: cluster.get("configmap", f"{BROKER}-b-settings"), "its ConfigMap")
    # Topics follow onto the new group (here: the same local broker, see the module doc).
    topic = wait_for(
        lambda: (
            (t := cluster.get("topic", "events")) and t["status"].get("groups") == ["a", "b"] and t
        ),
        "the Topic on both groups",
    )
    assert ready_condition(topic)["status"] == "True"

    # Group b resolves to the local broker, which holds messages: scale-in must wait.
    cluster.merge_patch("broker", BROKER, {"spec": {"groups": 1}})
    broker = cluster.wait_ready("broker", BROKER, "False", "ScaleInRefused")
    message = ready_condition(broker)["message"]
    assert "group b holds" in message and "OrderEvents" in message
    assert cluster.get("statefulset", f"{BROKER}-b") is not None

    # Once the topics are gone from the broker, the group goes.
    cluster.delete("topics", "--all")
    with AdminClient(endpoint) as admin:
        admin.delete_topic("kept")
    wait_for(lambda: cluster.get("statefulset", f"{BROKER}-b") is None, "group b to go")
    for kind, name in (
        ("configmap", f"{BROKER}-b-settings"),
        ("service", f"{BROKER}-b"),
        ("service", f"{BROKER}-b-pods"),
        ("poddisruptionbudget", f"{BROKER}-b"),
    ):
        wait_for(
            lambda kind=kind, name=name: cluster.get(kind, name) is None, f"{kind} {name} to go"
        )
    assert cluster.get("statefulset", f"{BROKER}-a") is not None


def test_a_drained_group_can_be_removed_once_its_messages_are_consumed(
    cluster: Cluster,
) -> None:
    """Group b resolves to the local broker (see the module doc), which holds the topic."""
    endpoint = f"127.0.0.1:{cluster.broker_port}"
    cluster.merge_patch("broker", BROKER, {"spec": {"groups": 2}})
    wait_for(lambda: cluster.get("statefulset", f"{BROKER}-b"), "group b's StatefulSet")
    with AdminClient(endpoint) as admin:
        admin.create_topic("Leaving", read_queues=2)
    bodies = [f"leaving {i}".encode() for i in range(6)]
    send(endpoint, "Leaving", bodies)

    cluster.merge_patch("broker", BROKER, {"spec": {"drainGroups": ["b"]}})
    drained = wait_for(
        lambda: (g := group_status(cluster, "b")).get("unconsumedMessages") == len(bodies) and g,
        "the Broker status to count group b's unconsumed messages",
    )
    assert drained["draining"] is True
    # Writes are off on the draining group; reads go on.
    with AdminClient(endpoint) as admin:
        assert admin.get_topic("Leaving").perm == Permission.READ

    cluster.merge_patch("broker", BROKER, {"spec": {"groups": 1}})
    broker = cluster.wait_ready("broker", BROKER, "False", "ScaleInRefused")
    message = ready_condition(broker)["message"]
    assert f"group b (draining) holds {len(bodies)} unconsumed message(s)" in message
    assert "'Leaving'" in message
    assert cluster.get("statefulset", f"{BROKER}-b") is not None

    # Consumed, not deleted: the messages stay on disk, yet nothing is lost by removing b.
    assert sorted(receive(endpoint, "Leaving", "leavers", len(bodies))) == sorted(bodies)
    wait_for(lambda: cluster.get("statefulset", f"{BROKER}-b") is None, "group b to go")
    with AdminClient(endpoint) as admin:
        held = admin.queue_offsets("Leaving")
    assert sum(q.max_offset - q.min_offset for q in held) == len(bodies)
    # The status reminds that the entry outlived its group.
    wait_for(
        lambda: (
            "spec.drainGroups names group b, which this Broker does not have"
            in ready_condition(cluster.get("broker", BROKER)).get("message", "")
        ),
        "the status to point at the leftover drainGroups entry",
    )
    cluster.merge_patch("broker", BROKER, {"spec": {"drainGroups": None}})


def test_external_access_exposes_each_master_and_maps_its_address(cluster: Cluster) -> None:
    for name, addresses in (
        ("edge-node-2", {"InternalIP": "10.9.0.2"}),
        ("edge-node-1", {"InternalIP": "10.9.0.1", "ExternalIP": "203.0.113.10"}),
    ):
        cluster.plane.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name},
                    "status": {
                        "addresses": [{"type": t, "address": a} for t, a in addresses.items()]
                    },
                }
            ]
        )
        # Node addresses are status: written as kubelet would.
        status = {"addresses": [{"type": t, "address": a} for t, a in addresses.items()]}
        cluster.plane.kubectl(
            "patch", "node", name, "--subresource", "status", "--type", "merge",
            "-p", json.dumps({"status": status}),
        )  # fmt: skip
    edge = broker_manifest(groups=2, externalAccess={"type": "NodePort", "nodePortBase": 31500})
    edge["metadata"]["name"] = "edge"
    cluster.apply(edge)
    for index, suffix in enumerate("ab"):
        service = wait_for(
            lambda suffix=suffix: cluster.get("service", f"edge-{suffix}-external"),
            f"the external Service of group {suffix}",
        )
        assert service["spec"]["type"] == "NodePort"
        assert service["spec"]["selector"] == {
            "skiff.io/broker": "edge",
            "skiff.io/group": suffix,
            "skiff.io/role": "master",
        }
        (port,) = service["spec"]["ports"]
        assert (port["port"], port["nodePort"]) == (8082, 31500 + index)
    settings = cluster.get("configmap", "edge-a-settings")
    assert settings is not None and settings["data"]["SKIFF_EXTERNAL_LISTEN"] == "0.0.0.0:8082"

    def endpoints() -> dict:
        return (cluster.get("configmap", "edge-endpoints") or {}).get("data") or {}

    expected = {"edge-a": "203.0.113.10:31500", "edge-b": "203.0.113.10:31501"}
    wait_for(lambda: endpoints() == expected, f"the endpoints map {expected}")
    # The brokers may read it: their account has get on ConfigMaps.
    shown = cluster.plane.kubectl(
        "get", "configmap", "edge-endpoints", "-n", NAMESPACE, "-o", "json",
        "--as", f"system:serviceaccount:{NAMESPACE}:edge-broker",
    ).stdout  # fmt: skip
    assert json.loads(shown)["data"] == expected

    cluster.merge_patch(
        "broker", "edge", {"spec": {"externalAccess": {"advertisedHost": "mq.example.test"}}}
    )
    expected = {"edge-a": "mq.example.test:31500", "edge-b": "mq.example.test:31501"}
    wait_for(lambda: endpoints() == expected, f"the endpoints map {expected}")
    wait_for(
        lambda: (
            group_status_of(cluster, "edge", "b").get("externalEndpoint") == "mq.example.test:31501"
        ),
        "the status to show group b's external endpoint",
    )

    # A load balancer: no address until the cloud assigns one.
    cluster.merge_patch(
        "broker",
        "edge",
        {"spec": {"externalAccess": {"type": "LoadBalancer", "nodePortBase": None,
                                     "advertisedHost": None}}},
    )  # fmt: skip
    wait_for(
        lambda: (
            (cluster.get("service", "edge-a-external") or {}).get("spec", {}).get("type")
            == "LoadBalancer"
        ),
        "the external Services to become load balancers",
    )
    wait_for(lambda: endpoints() == {}, "the endpoints map to drop addresses not known yet")
    ingress = {"loadBalancer": {"ingress": [{"ip": "198.51.100.4"}]}}
    cluster.merge_patch("service", "edge-a-external", {"status": ingress}, "status")
    wait_for(lambda: endpoints() == {"edge-a": "198.51.100.4:8082"}, "group a's load balancer")
    cluster.delete("broker", "edge")


def test_each_group_is_fenced_by_a_network_policy_that_can_be_turned_off(
    cluster: Cluster,
) -> None:
    fenced = broker_manifest(groups=2, externalAccess={"type": "LoadBalancer"})
    fenced["metadata"]["name"] = "fenced"
    cluster.apply(fenced)
    for suffix in "ab":
        policy = wait_for(
            lambda suffix=suffix: cluster.get("networkpolicy", f"fenced-{suffix}"),
            f"the NetworkPolicy of group {suffix}",
        )
        group = {"skiff.io/broker": "fenced", "skiff.io/group": suffix}
        assert policy["spec"]["podSelector"] == {"matchLabels": group}
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        clients, replication = policy["spec"]["ingress"]
        # Client, metrics and external ports from anywhere; replication only from the group.
        assert "from" not in clients
        assert clients["ports"] == [
            {"protocol": "TCP", "port": 8081},
            {"protocol": "TCP", "port": 5557},
            {"protocol": "TCP", "port": 8082},
        ]
        assert replication == {
            "from": [{"podSelector": {"matchLabels": group}}],
            "ports": [{"protocol": "TCP", "port": 10912}],
        }
    cluster.merge_patch("broker", "fenced", {"spec": {"networkPolicy": {"enabled": False}}})
    for suffix in "ab":
        wait_for(
            lambda suffix=suffix: cluster.get("networkpolicy", f"fenced-{suffix}") is None,
            f"the NetworkPolicy of group {suffix} to go once turned off",
        )
    assert cluster.get("statefulset", "fenced-a") is not None
    cluster.delete("broker", "fenced")


# A stand-in for the Prometheus Operator's PodMonitor CRD: its group, version and names,
# and no schema (the operator's PodMonitor is checked field by field below).
STAND_IN_POD_MONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podmonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {
            "kind": "PodMonitor",
            "listKind": "PodMonitorList",
            "plural": "podmonitors",
            "singular": "podmonitor",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def test_probes_ask_the_health_service_and_a_pod_monitor_follows_the_spec(
    cluster: Cluster,
) -> None:
    monitored = broker_manifest(metrics={"podMonitor": True})
    monitored["metadata"]["name"] = "monitored"
    cluster.apply(monitored)
    stateful_set = wait_for(lambda: cluster.get("statefulset", "monitored-a"), "the StatefulSet")
    (container,) = stateful_set["spec"]["template"]["spec"]["containers"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == 8081
    assert {"name": "metrics", "containerPort": 5557, "protocol": "TCP"} in container["ports"]

    def pod_monitor_status() -> str:
        broker = cluster.get("broker", "monitored") or {}
        return (broker.get("status") or {}).get("podMonitor", "")

    # Without the Prometheus Operator's CRDs the Broker says why it has no PodMonitor.
    missing = wait_for(pod_monitor_status, "status.podMonitor")
    assert "no monitoring.coreos.com/v1 PodMonitor kind" in missing

    cluster.apply(STAND_IN_POD_MONITOR_CRD)
    cluster.plane.kubectl(
        "wait", "--for", "condition=Established", "--timeout", "60s",
        "crd/podmonitors.monitoring.coreos.com",
    )  # fmt: skip
    # Any change of the spec reconciles the Broker again.
    cluster.merge_patch("broker", "monitored", {"spec": {"defaultReadQueues": 16}})
    monitor = wait_for(lambda: cluster.get("podmonitor", "monitored"), "the PodMonitor")
    assert monitor["spec"]["selector"] == {"matchLabels": {"skiff.io/broker": "monitored"}}
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics"}]
    (owner,) = monitor["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Broker", "monitored")
    wait_for(lambda: pod_monitor_status().startswith("PodMonitor monitored"), "the status")

    cluster.merge_patch("broker", "monitored", {"spec": {"metrics": {"podMonitor": False}}})
    wait_for(lambda: cluster.get("podmonitor", "monitored") is None, "the PodMonitor to go")
    cluster.delete("broker", "monitored")


def group_status_of(cluster: Cluster, broker: str, suffix: str) -> dict:
    groups = ((cluster.get("broker", broker) or {}).get("status") or {}).get("groups") or []
    return next((g for g in groups if g["name"] == suffix), {})


def test_deleting_a_broker_cascades_to_its_children(cluster: Cluster) -> None:
    cascade = broker_manifest()
    cascade["metadata"]["name"] = "cascade"
    cluster.apply(cascade)
    children = [
        ("statefulset", "cascade-a"),
        ("service", "cascade-a"),
        ("service", "cascade-a-pods"),
        ("configmap", "cascade-a-settings"),
        ("poddisruptionbudget", "cascade-a"),
        ("networkpolicy", "cascade-a"),
    ]
    for kind, name in children:
        wait_for(lambda kind=kind, name=name: cluster.get(kind, name), f"{kind} {name}")
    # The group's Lease is the brokers' own; the operator makes the Broker its owner.
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "cascade-a",
            "namespace": NAMESPACE,
            "labels": {"skiff.io/cluster": "cascade", "skiff.io/group": "cascade-a"},
        },
        "spec": {"holderIdentity": "cascade-a-0", "leaseDurationSeconds": 15},
    }
    cluster.plane.kubectl("create", "--as", BROKER_ACCOUNT, "-f", "-", input=json.dumps(lease))
    wait_for(
        lambda: [o["name"] for o in cluster.get("lease", "cascade-a")["metadata"].get(
            "ownerReferences", [])] == ["cascade"],
        "the operator to make the Broker own its group's Lease",
    )  # fmt: skip
    children.append(("lease", "cascade-a"))
    with running_controllers(cluster.plane, "garbage-collector-controller"):
        cluster.delete("broker", "cascade")
        for kind, name in children:
            wait_for(
                lambda kind=kind, name=name: cluster.get(kind, name) is None,
                f"the garbage collector to delete {kind} {name}",
            )


def test_data_claims_are_kept_unless_asked(cluster: Cluster) -> None:
    """The StatefulSet controller creates the claims; deleting a Broker keeps them unless
    ``deleteClaimsWithBroker``. Pods are created but never scheduled (no scheduler)."""
    for name, delete_claims in (("keep", False), ("drop", True)):
        manifest = broker_manifest(
            replicasPerGroup=1, storage={"size": "1Gi", "deleteClaimsWithBroker": delete_claims}
        )
        manifest["metadata"]["name"] = name
        cluster.apply(manifest)
        wait_for(lambda name=name: cluster.get("statefulset", f"{name}-a"), f"{name}-a")
    controllers = (
        "garbage-collector-controller",
        "statefulset-controller",
        "serviceaccount-controller",
        "persistentvolumeclaim-protection-controller",
    )
    with running_controllers(cluster.plane, *controllers):
        for name in ("keep", "drop"):
            wait_for(
                lambda name=name: cluster.get("persistentvolumeclaim", f"data-{name}-a-0"),
                f"the claim of pod {name}-a-0",
            )
        cluster.delete("broker", "keep", "drop")
        wait_for(
            lambda: cluster.get("persistentvolumeclaim", "data-drop-a-0") is None,
            "the claim of the Broker that asked for it to be deleted",
        )
        wait_for(lambda: cluster.get("statefulset", "keep-a") is None, "keep-a to go")
        claim = cluster.get("persistentvolumeclaim", "data-keep-a-0")
        assert claim is not None and not claim["metadata"].get("deletionTimestamp")


def test_deleting_the_broker_is_not_held_up(cluster: Cluster) -> None:
    broker = cluster.get("broker", BROKER)
    assert broker is not None
    # Children go by owner references (garbage collection); the operator's finalizer
    # (it stops the Broker's status timer) is released at once.
    cluster.delete("broker", BROKER)
    assert cluster.get("broker", BROKER) is None
    stateful_set = cluster.get("statefulset", f"{BROKER}-a")
    if stateful_set is not None:  # no garbage collector runs here
        assert stateful_set["metadata"]["ownerReferences"][0]["uid"] == broker["metadata"]["uid"]
