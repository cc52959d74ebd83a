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
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.verification import PolicyBuilder, Store
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from tests.support.broker_process import BrokerProcess
from tests.support.kube_control_plane import (
    REPO_ROOT,
    ControlPlane,
    free_port,
    running_controllers,
    write_kubeconfig,
)
from tests.support.waiting import wait_for

from skiff_broker.client import credentials as skiff_credentials
from skiff_broker.client.admin import AclEntry, AdminClient, Permission
from skiff_broker.client.errors import NotFound, PermissionDenied, Unauthenticated
from skiff_operator.broker_spec import BrokerSpec
from skiff_operator.certificates import KeyPair, certificate_contents, issue_leaf, new_ca

NAMESPACE = "shop"
OPERATOR_NAMESPACE = "skiff-system"
BROKER = "orders"
DEADLINE_S = 90.0


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

    def admin_keys(self, broker: str = BROKER) -> skiff_credentials.Credentials:
        """The Broker's super user, from the admin Secret the operator made (auth is on)."""
        secret = wait_for(
            lambda: self.get("secret", f"{broker}-admin"), f"{broker}-admin", deadline_s=DEADLINE_S
        )
        data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
        return skiff_credentials.Credentials(data["accessKey"], data["secretKey"])

    def admin(self) -> AdminClient:
        """The local broker's admin service, signed as the Broker's super user."""
        return AdminClient(f"127.0.0.1:{self.broker_port}", credentials=self.admin_keys())

    def client_keys(self) -> Credentials:
        """The super user's keys for the official client (producers and consumers)."""
        keys = self.admin_keys()
        return Credentials(keys.access_key, keys.secret_key)

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
            return wait_for(
                matches, f"{kind} {name} Ready={status} {reason}", deadline_s=DEADLINE_S
            )
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
        # The operator here watches every namespace (the tests read nodes, too): the opt-in.
        "--set", "rbac.clusterWide=true",
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
    # Leases: read for status and adopted (patch); list, create and update are held
    # only to grant them to the brokers. Nothing watches them.
    assert can("patch", "leases.coordination.k8s.io") == "yes"
    assert can("watch", "leases.coordination.k8s.io") == "no"
    assert can("create", "roles.rbac.authorization.k8s.io") == "yes"
    assert can("delete", "pods") == "yes"
    assert can("list", "nodes") == "yes"
    assert can("create", "networkpolicies.networking.k8s.io") == "yes"
    assert can("delete", "networkpolicies.networking.k8s.io") == "yes"
    assert can("escalate", "networkpolicies.networking.k8s.io") == "no"
    # Secrets: made once (replication, admin), read by name (a User's keys go to every
    # group's master, also masters elected later) and renewed by name (TLS); never listed,
    # never deleted (a User's Secret goes with the User by garbage collection).
    assert can("get", "secrets") == "yes"
    assert can("patch", "secrets") == "yes"
    assert can("list", "secrets") == "no"
    assert can("watch", "secrets") == "no"
    assert can("create", "secrets") == "yes"
    assert can("delete", "secrets") == "no"
    # Pods: listed and deleted to roll out a template; patch only to grant it onwards.
    assert can("get", "pods") == "no"
    assert can("update", "pods") == "no"
    assert can("delete", "serviceaccounts") == "no"
    assert can("delete", "roles.rbac.authorization.k8s.io") == "no"
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
    stateful_set = wait_for(
        lambda: cluster.get("statefulset", f"{BROKER}-a"), "the StatefulSet", deadline_s=DEADLINE_S
    )
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
        ("secret", f"{BROKER}-admin"),
        # TLS from the operator's own CA, the default.
        ("secret", f"{BROKER}-ca"),
        ("secret", f"{BROKER}-tls"),
    ]
    for kind, name in children:
        child = wait_for(
            lambda kind=kind, name=name: cluster.get(kind, name),
            f"{kind} {name}",
            deadline_s=DEADLINE_S,
        )
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
    # 4.x applications set namesrvAddr to the same Service's remoting port.
    assert status["remotingEndpoint"] == f"{BROKER}.{NAMESPACE}.svc.cluster.local:8080"
    assert status["groups"][0]["serviceEndpoint"] == (
        f"{BROKER}-a.{NAMESPACE}.svc.cluster.local:8081"
    )
    assert status["groups"][0]["master"] == ""
    pod = stateful_set["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{BROKER}-broker"
    # Authentication is on by default; the pods start with the admin Secret's super user.
    settings = cluster.get("configmap", f"{BROKER}-a-settings")
    assert settings is not None and settings["data"]["SKIFF_AUTH"] == "enabled"
    (init_user,) = [e for e in pod["containers"][0]["env"] if e["name"] == "SKIFF_AUTH_INIT_USER"]
    assert init_user["valueFrom"]["secretKeyRef"] == {"name": f"{BROKER}-admin", "key": "user"}
    admin_secret = cluster.get("secret", f"{BROKER}-admin")
    assert admin_secret is not None
    assert set(admin_secret["data"]) == {"accessKey", "secretKey", "user"}
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

    # The Broker has one group of two pods: these names, and nothing else, may be written.
    allowed = {
        "leases.coordination.k8s.io": {"list", "create"},
        f"leases.coordination.k8s.io/{BROKER}-a": {"get", "list", "create", "update", "patch"},
        f"leases.coordination.k8s.io/{BROKER}-b": {"list", "create"},
        "pods": set(),
        f"pods/{BROKER}-a-0": {"patch"},
        f"pods/{BROKER}-a-1": {"patch"},
        f"pods/{BROKER}-a-2": set(),
        "configmaps": set(),
        f"configmaps/{BROKER}-endpoints": {"get"},
        f"configmaps/{BROKER}-a-settings": set(),
    }
    verbs = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
    for resource, granted in allowed.items():
        for verb in verbs:
            if "/" in resource and verb in ("list", "create", "deletecollection"):
                continue  # not asked of one object
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
    assert can("list", "leases.coordination.k8s.io", OPERATOR_NAMESPACE) == "no"


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
        deadline_s=DEADLINE_S,
    )
    wait_for(
        lambda: settings_hash() != before,
        "a new settings hash on the pod template",
        deadline_s=DEADLINE_S,
    )
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
        deadline_s=DEADLINE_S,
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
        deadline_s=DEADLINE_S,
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

    wait_for(
        lambda: cluster.get("pod", replica) is None,
        "the replica to be restarted",
        deadline_s=DEADLINE_S,
    )
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
        deadline_s=DEADLINE_S,
    )
    assert cluster.get("pod", master) is not None
    # The replica caught up: the master may go, and the Lease can pass to the replica.
    write_lease(cluster, "a", master, 5, [master, replica], "10.0.0.7:8081")
    wait_for(
        lambda: cluster.get("pod", master) is None,
        "the master to be restarted last",
        deadline_s=DEADLINE_S,
    )

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
    # The certificate Secret, as kubelet would mount it: one file per key.
    for volume in pod["volumes"]:
        if "secret" not in volume:
            continue
        (secret_mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        secret = cluster.get("secret", volume["secret"]["secretName"])
        assert secret is not None, f"the pod mounts Secret {volume['secret']['secretName']}"
        mounted = cluster.work_dir / f"pod-{volume['name']}"
        mounted.mkdir(exist_ok=True)
        for key, value in secret["data"].items():
            (mounted / key).write_bytes(base64.b64decode(value))
        env = {k: v.replace(secret_mount["mountPath"], str(mounted)) for k, v in env.items()}
    container_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "grpc")
    assert env["SKIFF_LISTEN"] == f"0.0.0.0:{container_port}"
    env["SKIFF_LISTEN"] = f"127.0.0.1:{cluster.broker_port}"
    env["SKIFF_ADVERTISE"] = env["SKIFF_ADVERTISE"].replace(
        f":{container_port}", f":{cluster.broker_port}"
    )
    # The pod's fixed replication port may be taken on a shared test machine.
    ha_port = free_port()
    env["SKIFF_HA_LISTEN"] = f"127.0.0.1:{ha_port}"
    env["SKIFF_HA_ADVERTISE"] = f"127.0.0.1:{ha_port}"
    # The pod's own metrics port, here on a shared machine: a free one. Nobody is named
    # to scrape it, so the pod binds it on its loopback.
    assert env["SKIFF_METRICS_LISTEN"] == "127.0.0.1:5557"
    env["SKIFF_METRICS_LISTEN"] = "127.0.0.1:0"
    # Nor is the remoting port's default (8080) free here; routes name the address a
    # client connected to.
    assert env["SKIFF_REMOTING_LISTEN"] == "0.0.0.0:8080"
    env["SKIFF_REMOTING_LISTEN"] = "127.0.0.1:0"
    assert env.pop("SKIFF_REMOTING_ADVERTISE").endswith(":8080")
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
            deadline_s=DEADLINE_S,
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


def send(endpoint: str, topic: str, bodies: list[bytes], keys: Credentials) -> None:
    producer = Producer(ClientConfiguration(endpoint, keys), (topic,))
    producer.startup()
    try:
        for body in bodies:
            message = Message()
            message.topic = topic
            message.body = body
            producer.send(message)
    finally:
        producer.shutdown()


def receive(endpoint: str, topic: str, group: str, count: int, keys: Credentials) -> list[bytes]:
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, keys), group, {topic: FilterExpression()}, 2
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
    # The waiting Topic is retried and lands once the broker answers: the operator signs
    # its calls as the Broker's super user.
    cluster.wait_ready("topic", "early", "True", "Reconciled")
    # Authentication is on: an unsigned call is refused, the admin Secret's user may call.
    with AdminClient(broker.endpoint) as unsigned, pytest.raises(Unauthenticated):
        unsigned.broker_info()
    with cluster.admin() as admin:
        info = admin.broker_info()
    # The settings the operator rendered reached the broker.
    assert info.broker_name == f"{BROKER}-a"
    assert info.flush_type == "SYNC_FLUSH"

    cluster.apply(topic_manifest("events", topicName="OrderEvents", readQueues=4, writeQueues=4))
    topic = cluster.wait_ready("topic", "events", "True", "Reconciled")
    assert topic["status"]["groups"] == ["a"]
    assert (topic["status"]["readQueues"], topic["status"]["writeQueues"]) == (4, 4)
    with cluster.admin() as admin:
        stored = admin.get_topic("OrderEvents")
    assert (stored.read_queues, stored.write_queues) == (4, 4)

    bodies = [f"order {i}".encode() for i in range(5)]
    send(broker.endpoint, "OrderEvents", bodies, cluster.client_keys())
    assert sorted(
        receive(broker.endpoint, "OrderEvents", "billing", len(bodies), cluster.client_keys())
    ) == sorted(bodies)

    # The broker serves the certificate the operator issued: a client trusting only the
    # Broker's CA completes a handshake for the group's Service name.
    ca_pem = secret_bytes(cluster, f"{BROKER}-ca", "ca.crt")
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with (
        socket.create_connection(("127.0.0.1", cluster.broker_port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=f"{BROKER}-a.{NAMESPACE}.svc") as tls,
    ):
        served = tls.getpeercert(binary_form=True)
    assert served == x509.load_pem_x509_certificate(
        secret_bytes(cluster, f"{BROKER}-tls", "tls.crt")
    ).public_bytes(serialization.Encoding.DER)


def test_topic_changes_follow_the_safe_order(cluster: Cluster) -> None:
    endpoint = f"127.0.0.1:{cluster.broker_port}"
    cluster.apply(topic_manifest("shrinking", readQueues=8, writeQueues=8))
    cluster.wait_ready("topic", "shrinking", "True", "Reconciled")
    bodies = [f"pending {i}".encode() for i in range(32)]
    send(endpoint, "shrinking", bodies, cluster.client_keys())

    cluster.merge_patch("topic", "shrinking", {"spec": {"readQueues": 2, "writeQueues": 2}})
    topic = cluster.wait_ready("topic", "shrinking", "False", "Draining")
    # Writes shrank first; reads wait for the queues no longer written to drain.
    assert (topic["status"]["readQueues"], topic["status"]["writeQueues"]) == (8, 2)
    assert "holds" in ready_condition(topic)["message"]
    with cluster.admin() as admin:
        stored = admin.get_topic("shrinking")
    assert (stored.read_queues, stored.write_queues) == (8, 2)

    assert len(
        receive(endpoint, "shrinking", "drainers", len(bodies), cluster.client_keys())
    ) == len(bodies)
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


def user_manifest(name: str, **spec: Any) -> dict:
    return {
        "apiVersion": "skiff.io/v1alpha1",
        "kind": "User",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"brokerRef": {"name": BROKER}, **spec},
    }


def stored_keys(cluster: Cluster, user: str) -> dict[str, str]:
    secret = cluster.get("secret", f"{user}-credentials") or {}
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def users_on_broker(cluster: Cluster) -> set[str]:
    # Every pod of the Broker resolves to this one broker here (see the module docstring).
    with cluster.admin() as admin:
        return {user.access_key for user in admin.list_users()}


def test_a_user_gets_its_keys_and_acl_on_the_brokers(cluster: Cluster) -> None:
    publish = {"resources": ["Topic:OrderEvents"], "actions": ["Pub"]}
    cluster.apply(user_manifest("billing", acl=[publish]))
    user = cluster.wait_ready("user", "billing", "True", "Reconciled")
    # On the master of the Broker's one group (the pod holding its Lease).
    assert user["status"]["groups"] == ["a"]
    assert "is on 1/1 group(s)" in ready_condition(user)["message"]
    keys = stored_keys(cluster, "billing")
    assert user["status"]["accessKey"] == keys["accessKey"]
    assert user["status"]["secretName"] == "billing-credentials"
    assert len(keys["secretKey"]) >= 32
    secret = cluster.get("secret", "billing-credentials")
    assert secret is not None
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("User", "billing")
    with cluster.admin() as admin:
        stored = admin.get_user(keys["accessKey"])
        assert (stored.super_user, stored.enabled) == (False, True)
        assert admin.get_acl(keys["accessKey"]) == [AclEntry(("Topic:OrderEvents",), ("Pub",))]
    # The user's keys work as its ACL says: publishing to the topic, nothing more.
    send(f"127.0.0.1:{cluster.broker_port}", "OrderEvents", [b"from billing"],
         Credentials(keys["accessKey"], keys["secretKey"]))  # fmt: skip
    as_user = skiff_credentials.Credentials(keys["accessKey"], keys["secretKey"])
    endpoint = f"127.0.0.1:{cluster.broker_port}"
    with AdminClient(endpoint, credentials=as_user) as admin, pytest.raises(PermissionDenied):
        admin.list_topics()

    subscribe = {"resources": ["Group:billing"], "actions": ["Sub"], "decision": "Deny"}
    cluster.merge_patch("user", "billing", {"spec": {"acl": [subscribe], "disabled": True}})
    cluster.wait_ready("user", "billing", "True", "Reconciled")
    with cluster.admin() as admin:
        assert not admin.get_user(keys["accessKey"]).enabled
        assert admin.get_acl(keys["accessKey"]) == [AclEntry(("Group:billing",), ("Sub",), "Deny")]
    # The keys are made once: reconciling again keeps them.
    assert stored_keys(cluster, "billing") == keys


def test_rotation_keeps_the_previous_keys_valid_until_retired(cluster: Cluster) -> None:
    first = stored_keys(cluster, "billing")["accessKey"]

    def annotate(token: str) -> None:
        cluster.plane.kubectl(
            "annotate", "user", "billing", "-n", NAMESPACE, f"skiff.io/rotate={token}",
            "--overwrite",
        )  # fmt: skip

    annotate("one")
    keys = wait_for(
        lambda: (k := stored_keys(cluster, "billing")).get("previousAccessKey") == first and k,
        "the first rotation",
        deadline_s=DEADLINE_S,
    )
    second = keys["accessKey"]
    assert second != first
    # Both pairs are valid during the grace period (an hour by default).
    wait_for(
        lambda: {first, second} <= users_on_broker(cluster),
        "both keys on the broker",
        deadline_s=DEADLINE_S,
    )
    user = wait_for(
        lambda: (
            (u := cluster.get("user", "billing")) and u["status"].get("accessKey") == second and u
        ),
        "the status to name the new key",
        deadline_s=DEADLINE_S,
    )
    assert user["status"]["previousAccessKey"] == first

    # A rotation during the grace retires the previous pair first; with no grace the
    # pair it replaces goes as well.
    cluster.merge_patch("user", "billing", {"spec": {"rotationGraceSeconds": 0}})
    annotate("two")
    keys = wait_for(
        lambda: (
            (k := stored_keys(cluster, "billing")).get("accessKey") not in (first, second)
            and "previousAccessKey" not in k
            and k
        ),
        "the second rotation to finish",
        deadline_s=DEADLINE_S,
    )
    wait_for(
        lambda: (
            users_on_broker(cluster) & {first, second, keys["accessKey"]} == {keys["accessKey"]}
        ),
        "only the newest key on the broker",
        deadline_s=DEADLINE_S,
    )
    cluster.wait_ready("user", "billing", "True", "Reconciled")


def test_a_user_waits_for_a_group_without_a_master(cluster: Cluster) -> None:
    """Users go to masters only (replicas copy them from theirs): no master, no write."""
    stale = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    write_lease(cluster, "a", f"{BROKER}-a-0", 4, [f"{BROKER}-a-0"], "10.0.0.6:8081",
                renewed=stale, duration_s=15)  # fmt: skip
    cluster.merge_patch("user", "billing", {"spec": {"disabled": False}})
    user = cluster.wait_ready("user", "billing", "False", "BrokerUnavailable")
    message = ready_condition(user)["message"]
    assert f"no broker holds the Lease {BROKER}-a" in message
    assert "is on 0/1 group(s)" in message
    with cluster.admin() as admin:
        assert not admin.get_user(stored_keys(cluster, "billing")["accessKey"]).enabled

    write_lease(cluster, "a", f"{BROKER}-a-0", 5, [f"{BROKER}-a-0", f"{BROKER}-a-1"],
                "10.0.0.6:8081")  # fmt: skip
    cluster.wait_ready("user", "billing", "True", "Reconciled")
    with cluster.admin() as admin:
        assert admin.get_user(stored_keys(cluster, "billing")["accessKey"]).enabled


def test_deleting_a_user_removes_it_from_the_brokers_and_its_secret(cluster: Cluster) -> None:
    access_key = stored_keys(cluster, "billing")["accessKey"]
    assert access_key in users_on_broker(cluster)
    # The Secret goes with its User by garbage collection (the operator may not delete
    # Secrets).
    with running_controllers(cluster.plane, "garbage-collector-controller"):
        cluster.delete("user", "billing")
        assert access_key not in users_on_broker(cluster)
        wait_for(
            lambda: cluster.get("secret", "billing-credentials") is None,
            "the User's Secret to be collected",
            deadline_s=DEADLINE_S,
        )


def test_a_user_made_again_before_collection_gets_fresh_keys(cluster: Cluster) -> None:
    cluster.apply(user_manifest("again"))
    cluster.wait_ready("user", "again", "True", "Reconciled")
    first = stored_keys(cluster, "again")["accessKey"]
    # Deleted while no garbage collector runs: the old Secret outlives its User.
    cluster.delete("user", "again")
    assert cluster.get("secret", "again-credentials") is not None
    cluster.apply(user_manifest("again"))
    # The leftover keys are not taken over (they were removed from the brokers) ...
    wait_for(
        lambda: "belongs to an earlier User 'again'" in cluster.operator_log_text(),
        "the operator to turn the leftover Secret down",
        deadline_s=DEADLINE_S,
    )
    assert first not in users_on_broker(cluster)
    assert stored_keys(cluster, "again")["accessKey"] == first
    with running_controllers(cluster.plane, "garbage-collector-controller"):
        # ... but once the Secret is collected, the new User gets a pair of its own.
        user = cluster.wait_ready("user", "again", "True", "Reconciled")
    fresh = stored_keys(cluster, "again")["accessKey"]
    assert fresh != first
    assert user["status"]["accessKey"] == fresh and fresh in users_on_broker(cluster)
    with running_controllers(cluster.plane, "garbage-collector-controller"):
        cluster.delete("user", "again")
        wait_for(
            lambda: cluster.get("secret", "again-credentials") is None,
            "the User's Secret to be collected",
            deadline_s=DEADLINE_S,
        )


def test_a_user_of_a_missing_broker_says_so_and_deletes_freely(cluster: Cluster) -> None:
    orphan = user_manifest("stray")
    orphan["spec"]["brokerRef"]["name"] = "nowhere"
    cluster.apply(orphan)
    user = cluster.wait_ready("user", "stray", "False", "BrokerNotFound")
    assert "Broker 'nowhere' does not exist" in ready_condition(user)["message"]
    cluster.delete("user", "stray")
    assert cluster.get("user", "stray") is None


def test_deleting_a_topic_deletes_it_on_the_brokers_unless_retained(cluster: Cluster) -> None:
    cluster.apply(topic_manifest("kept", deletionPolicy="Retain"))
    cluster.apply(topic_manifest("dropped"))
    cluster.wait_ready("topic", "kept", "True", "Reconciled")
    cluster.wait_ready("topic", "dropped", "True", "Reconciled")
    cluster.delete("topic", "kept", "dropped")
    assert cluster.get("topic", "dropped") is None
    with cluster.admin() as admin:
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


def test_a_broker_with_auth_off_renders_no_auth_settings(cluster: Cluster) -> None:
    open_broker = broker_manifest(auth={"enabled": False})
    open_broker["metadata"]["name"] = "open"
    cluster.apply(open_broker)
    stateful_set = wait_for(
        lambda: cluster.get("statefulset", "open-a"), "the StatefulSet", deadline_s=DEADLINE_S
    )
    settings = cluster.get("configmap", "open-a-settings")
    assert settings is not None
    assert not any(key.startswith("SKIFF_AUTH") for key in settings["data"])
    (container,) = stateful_set["spec"]["template"]["spec"]["containers"]
    assert not any(e["name"].startswith("SKIFF_AUTH") for e in container["env"])
    # Secrets are created before the pods' objects: no admin Secret was made.
    assert cluster.get("secret", "open-replication") is not None
    assert cluster.get("secret", "open-admin") is None
    cluster.delete("broker", "open")


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
        deadline_s=DEADLINE_S,
    )
    topic = cluster.wait_ready("topic", "events", "True", "Reconciled")
    assert topic["status"]["readQueues"] == 6
    with cluster.admin() as admin:
        assert admin.get_topic("OrderEvents").read_queues == 6


def test_scaling_out_adds_a_group_and_scaling_in_waits_for_its_messages(cluster: Cluster) -> None:
    cluster.merge_patch("broker", BROKER, {"spec": {"groups": 2}})
    wait_for(
        lambda: cluster.get("statefulset", f"{BROKER}-b"),
        "the second group's StatefulSet",
        deadline_s=DEADLINE_S,
    )
    wait_for(
        lambda: cluster.get("configmap", f"{BROKER}-b-settings"),
        "its ConfigMap",
        deadline_s=DEADLINE_S,
    )
    # Topics follow onto the new group (here: the same local broker, see the module doc).
    topic = wait_for(
        lambda: (
            (t := cluster.get("topic", "events")) and t["status"].get("groups") == ["a", "b"] and t
        ),
        "the Topic on both groups",
        deadline_s=DEADLINE_S,
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
    with cluster.admin() as admin:
        admin.delete_topic("kept")
    wait_for(
        lambda: cluster.get("statefulset", f"{BROKER}-b") is None,
        "group b to go",
        deadline_s=DEADLINE_S,
    )
    for kind, name in (
        ("configmap", f"{BROKER}-b-settings"),
        ("service", f"{BROKER}-b"),
        ("service", f"{BROKER}-b-pods"),
        ("poddisruptionbudget", f"{BROKER}-b"),
    ):
        wait_for(
            lambda kind=kind, name=name: cluster.get(kind, name) is None,
            f"{kind} {name} to go",
            deadline_s=DEADLINE_S,
        )
    assert cluster.get("statefulset", f"{BROKER}-a") is not None


def test_a_drained_group_can_be_removed_once_its_messages_are_consumed(
    cluster: Cluster,
) -> None:
    """Group b resolves to the local broker (see the module doc), which holds the topic."""
    endpoint = f"127.0.0.1:{cluster.broker_port}"
    cluster.merge_patch("broker", BROKER, {"spec": {"groups": 2}})
    wait_for(
        lambda: cluster.get("statefulset", f"{BROKER}-b"),
        "group b's StatefulSet",
        deadline_s=DEADLINE_S,
    )
    with cluster.admin() as admin:
        admin.create_topic("Leaving", read_queues=2)
    bodies = [f"leaving {i}".encode() for i in range(6)]
    send(endpoint, "Leaving", bodies, cluster.client_keys())

    cluster.merge_patch("broker", BROKER, {"spec": {"drainGroups": ["b"]}})
    drained = wait_for(
        lambda: (g := group_status(cluster, "b")).get("unconsumedMessages") == len(bodies) and g,
        "the Broker status to count group b's unconsumed messages",
        deadline_s=DEADLINE_S,
    )
    assert drained["draining"] is True
    # Writes are off on the draining group; reads go on.
    with cluster.admin() as admin:
        assert admin.get_topic("Leaving").perm == Permission.READ

    cluster.merge_patch("broker", BROKER, {"spec": {"groups": 1}})
    broker = cluster.wait_ready("broker", BROKER, "False", "ScaleInRefused")
    message = ready_condition(broker)["message"]
    assert f"group b (draining) holds {len(bodies)} unconsumed message(s)" in message
    assert "'Leaving'" in message
    assert cluster.get("statefulset", f"{BROKER}-b") is not None

    # Consumed, not deleted: the messages stay on disk, yet nothing is lost by removing b.
    assert sorted(
        receive(endpoint, "Leaving", "leavers", len(bodies), cluster.client_keys())
    ) == sorted(bodies)
    wait_for(
        lambda: cluster.get("statefulset", f"{BROKER}-b") is None,
        "group b to go",
        deadline_s=DEADLINE_S,
    )
    with cluster.admin() as admin:
        held = admin.queue_offsets("Leaving")
    assert sum(q.max_offset - q.min_offset for q in held) == len(bodies)
    # The status reminds that the entry outlived its group.
    wait_for(
        lambda: (
            "spec.drainGroups names group b, which this Broker does not have"
            in ready_condition(cluster.get("broker", BROKER)).get("message", "")
        ),
        "the status to point at the leftover drainGroups entry",
        deadline_s=DEADLINE_S,
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
    remoting_node_ports: dict[str, int] = {}
    for index, suffix in enumerate("ab"):
        service = wait_for(
            lambda suffix=suffix: cluster.get("service", f"edge-{suffix}-external"),
            f"the external Service of group {suffix}",
            deadline_s=DEADLINE_S,
        )
        assert service["spec"]["type"] == "NodePort"
        assert service["spec"]["selector"] == {
            "skiff.io/broker": "edge",
            "skiff.io/group": suffix,
            "skiff.io/role": "master",
        }
        port, remoting = service["spec"]["ports"]
        assert (port["port"], port["nodePort"]) == (8082, 31500 + index)
        # The remoting port's node port is Kubernetes' choice.
        assert remoting["port"] == 8080 and remoting["targetPort"] == "remoting-ext"
        remoting_node_ports[suffix] = remoting["nodePort"]
    settings = cluster.get("configmap", "edge-a-settings")
    assert settings is not None and settings["data"]["SKIFF_EXTERNAL_LISTEN"] == "0.0.0.0:8082"
    assert settings["data"]["SKIFF_REMOTING_EXTERNAL_LISTEN"] == "0.0.0.0:8083"

    def endpoints() -> dict:
        return (cluster.get("configmap", "edge-endpoints") or {}).get("data") or {}

    def with_remoting(host: str, grpc: dict[str, str]) -> dict[str, str]:
        remoting = {f"edge-{s}.remoting": f"{host}:{p}" for s, p in remoting_node_ports.items()}
        return {**grpc, **remoting}

    expected = with_remoting(
        "203.0.113.10", {"edge-a": "203.0.113.10:31500", "edge-b": "203.0.113.10:31501"}
    )
    wait_for(
        lambda: endpoints() == expected, f"the endpoints map {expected}", deadline_s=DEADLINE_S
    )
    # The brokers may read it: their account has get on ConfigMaps.
    shown = cluster.plane.kubectl(
        "get", "configmap", "edge-endpoints", "-n", NAMESPACE, "-o", "json",
        "--as", f"system:serviceaccount:{NAMESPACE}:edge-broker",
    ).stdout  # fmt: skip
    assert json.loads(shown)["data"] == expected

    cluster.merge_patch(
        "broker", "edge", {"spec": {"externalAccess": {"advertisedHost": "mq.example.test"}}}
    )
    expected = with_remoting(
        "mq.example.test", {"edge-a": "mq.example.test:31500", "edge-b": "mq.example.test:31501"}
    )
    wait_for(
        lambda: endpoints() == expected, f"the endpoints map {expected}", deadline_s=DEADLINE_S
    )
    wait_for(
        lambda: (
            group_status_of(cluster, "edge", "b").get("externalEndpoint") == "mq.example.test:31501"
        ),
        "the status to show group b's external endpoint",
        deadline_s=DEADLINE_S,
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
        deadline_s=DEADLINE_S,
    )
    wait_for(
        lambda: endpoints() == {},
        "the endpoints map to drop addresses not known yet",
        deadline_s=DEADLINE_S,
    )
    ingress = {"loadBalancer": {"ingress": [{"ip": "198.51.100.4"}]}}
    cluster.merge_patch("service", "edge-a-external", {"status": ingress}, "status")
    wait_for(
        lambda: (
            endpoints() == {"edge-a": "198.51.100.4:8082", "edge-a.remoting": "198.51.100.4:8080"}
        ),
        "group a's load balancer",
        deadline_s=DEADLINE_S,
    )
    cluster.delete("broker", "edge")


def test_each_group_is_fenced_by_a_network_policy_that_can_be_turned_off(
    cluster: Cluster,
) -> None:
    scraper = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    fenced = broker_manifest(
        groups=2, externalAccess={"type": "LoadBalancer"}, metrics={"allowFrom": [scraper]}
    )
    fenced["metadata"]["name"] = "fenced"
    cluster.apply(fenced)
    for suffix in "ab":
        policy = wait_for(
            lambda suffix=suffix: cluster.get("networkpolicy", f"fenced-{suffix}"),
            f"the NetworkPolicy of group {suffix}",
            deadline_s=DEADLINE_S,
        )
        group = {"skiff.io/broker": "fenced", "skiff.io/group": suffix}
        assert policy["spec"]["podSelector"] == {"matchLabels": group}
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        clients, replication, metrics = policy["spec"]["ingress"]
        # Client and external ports from anywhere; replication only from the group;
        # metrics only from the scraper the spec names.
        assert "from" not in clients
        assert clients["ports"] == [
            {"protocol": "TCP", "port": port} for port in (8081, 8080, 8082, 8083)
        ]
        assert replication == {
            "from": [{"podSelector": {"matchLabels": group}}],
            "ports": [{"protocol": "TCP", "port": 10912}],
        }
        assert metrics == {"from": [scraper], "ports": [{"protocol": "TCP", "port": 5557}]}
    settings = cluster.get("configmap", "fenced-a-settings")
    assert settings is not None and settings["data"]["SKIFF_METRICS_LISTEN"] == "0.0.0.0:5557"
    cluster.merge_patch("broker", "fenced", {"spec": {"networkPolicy": {"enabled": False}}})
    for suffix in "ab":
        wait_for(
            lambda suffix=suffix: cluster.get("networkpolicy", f"fenced-{suffix}") is None,
            f"the NetworkPolicy of group {suffix} to go once turned off",
            deadline_s=DEADLINE_S,
        )
    assert cluster.get("statefulset", "fenced-a") is not None
    cluster.delete("broker", "fenced")


def secret_bytes(cluster: Cluster, name: str, key: str) -> bytes:
    secret = cluster.get("secret", name)
    assert secret is not None, f"Secret {name}"
    return base64.b64decode(secret["data"][key])


def tls_status(cluster: Cluster, broker: str) -> dict:
    return ((cluster.get("broker", broker) or {}).get("status") or {}).get("tls") or {}


def tls_secret_manifest(name: str, data: dict[str, bytes]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "type": "kubernetes.io/tls",
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }


def verifies_for(leaf_pem: bytes, ca_pem: bytes, host: str) -> bool:
    """A TLS client trusting only ``ca_pem`` accepts ``leaf_pem`` for ``host``."""
    verifier = (
        PolicyBuilder()
        .store(Store([x509.load_pem_x509_certificate(ca_pem)]))
        .build_server_verifier(x509.DNSName(host))
    )
    verifier.verify(x509.load_pem_x509_certificate(leaf_pem), [])
    return True


def test_the_operators_ca_issues_a_certificate_the_pods_mount_and_renews_it(
    cluster: Cluster,
) -> None:
    name = "secure"
    manifest = broker_manifest(groups=2)
    manifest["metadata"]["name"] = name
    cluster.apply(manifest)
    stateful_set = wait_for(
        lambda: cluster.get("statefulset", f"{name}-b"), "the StatefulSet", deadline_s=DEADLINE_S
    )
    uid = cluster.get("broker", name)["metadata"]["uid"]
    for secret_name in (f"{name}-ca", f"{name}-tls"):
        secret = cluster.get("secret", secret_name)
        assert secret is not None, f"Secret {secret_name}"
        (owner,) = secret["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"]) == ("Broker", uid)
    assert cluster.get("secret", f"{name}-tls")["type"] == "kubernetes.io/tls"
    ca_pem = secret_bytes(cluster, f"{name}-ca", "ca.crt")
    leaf_pem = secret_bytes(cluster, f"{name}-tls", "tls.crt")
    assert secret_bytes(cluster, f"{name}-tls", "ca.crt") == ca_pem
    for host in (
        f"{name}.{NAMESPACE}.svc",
        f"{name}.{NAMESPACE}.svc.cluster.local",
        f"{name}-b.{NAMESPACE}",
        f"{name}-b-1.{name}-b-pods.{NAMESPACE}.svc.cluster.local",
    ):
        assert verifies_for(leaf_pem, ca_pem, host)

    pod = stateful_set["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == f"{name}-tls"
    (container,) = pod["containers"]
    assert {"name": "tls", "mountPath": "/etc/skiff/tls", "readOnly": True} in (
        container["volumeMounts"]
    )
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SKIFF_TLS_CERT"] == "/etc/skiff/tls/tls.crt"
    assert env["SKIFF_TLS_KEY"] == "/etc/skiff/tls/tls.key"
    assert env["SKIFF_TLS_CA"] == "/etc/skiff/tls/ca.crt"
    leaf = x509.load_pem_x509_certificate(leaf_pem)
    status = wait_for(
        lambda: tls_status(cluster, name).get("notAfter") and tls_status(cluster, name),
        "status.tls",
        deadline_s=DEADLINE_S,
    )
    assert status["source"] == "managed" and status["secretName"] == f"{name}-tls"
    assert status["notAfter"] == leaf.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert status["message"] == ""
    template_hash = stateful_set["spec"]["template"]["metadata"]["annotations"]

    # A certificate near its end (issued 80 of its 90 days ago by the same CA) is replaced
    # by the status pass; the CA stays, and the pods are not restarted for it.
    ca = KeyPair(ca_pem, secret_bytes(cluster, f"{name}-ca", "ca.key"))
    wanted = certificate_contents(
        BrokerSpec.from_manifest(manifest["spec"]), name, NAMESPACE, "cluster.local"
    )
    now = datetime.datetime.now(datetime.UTC)
    old = issue_leaf(ca, name, wanted, now - datetime.timedelta(days=80))
    cluster.apply(
        tls_secret_manifest(
            f"{name}-tls", {"tls.crt": old.cert_pem, "tls.key": old.key_pem, "ca.crt": ca_pem}
        )
    )
    renewed_pem = wait_for(
        lambda: (
            (pem := secret_bytes(cluster, f"{name}-tls", "tls.crt")) not in (old.cert_pem,) and pem
        ),
        "the operator to re-issue the expiring certificate",
        deadline_s=DEADLINE_S,
    )
    renewed = x509.load_pem_x509_certificate(renewed_pem)
    assert renewed.not_valid_after_utc - now > datetime.timedelta(days=89)
    assert verifies_for(renewed_pem, ca_pem, f"{name}-a.{NAMESPACE}.svc")
    assert secret_bytes(cluster, f"{name}-ca", "ca.crt") == ca_pem
    current = cluster.get("statefulset", f"{name}-b")
    assert current["spec"]["template"]["metadata"]["annotations"] == template_hash

    # A third group is reached by new names: the certificate is issued again to cover them.
    cluster.merge_patch("broker", name, {"spec": {"groups": 3}})
    wait_for(
        lambda: (
            f"{name}-c.{NAMESPACE}.svc" in _names(secret_bytes(cluster, f"{name}-tls", "tls.crt"))
        ),
        "a certificate naming the new group",
        deadline_s=DEADLINE_S,
    )
    assert secret_bytes(cluster, f"{name}-ca", "ca.crt") == ca_pem
    cluster.delete("broker", name)


def _names(cert_pem: bytes) -> set[str]:
    cert = x509.load_pem_x509_certificate(cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(san.get_values_for_type(x509.DNSName))


def test_a_users_secret_is_mounted_and_nothing_is_issued(cluster: Cluster) -> None:
    name = "byo"
    manifest = broker_manifest(tls={"mode": "enforcing", "secretName": "byo-cert"})
    manifest["metadata"]["name"] = name
    cluster.apply(manifest)
    # Told plainly while the Secret is missing: the pods cannot start without it.
    broker = cluster.wait_ready("broker", name, "False", "CertificateNotReady")
    assert (
        "Secret byo-cert (spec.tls.secretName) does not exist"
        in (ready_condition(broker)["message"])
    )
    # The status pass may tell before the reconcile applied the group.
    stateful_set = wait_for(
        lambda: cluster.get("statefulset", f"{name}-a"), "the StatefulSet", deadline_s=DEADLINE_S
    )
    pod = stateful_set["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "byo-cert"
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["SKIFF_TLS_CERT"] == "/etc/skiff/tls/tls.crt"
    # This Secret has no ca.crt, so the brokers are pointed at none.
    assert "SKIFF_TLS_CA" not in env
    config = cluster.get("configmap", f"{name}-a-settings")
    assert config["data"]["SKIFF_TLS_MODE"] == "enforcing"

    now = datetime.datetime.now(datetime.UTC)
    users_ca = new_ca("users", NAMESPACE, now)
    wanted = certificate_contents(
        BrokerSpec.from_manifest(manifest["spec"]), name, NAMESPACE, "cluster.local"
    )
    leaf = issue_leaf(users_ca, name, wanted, now)
    cluster.apply(
        tls_secret_manifest("byo-cert", {"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem})
    )
    status = wait_for(
        lambda: tls_status(cluster, name).get("notAfter") and tls_status(cluster, name),
        "the user's certificate in the status",
        deadline_s=DEADLINE_S,
    )
    assert status["source"] == "secret" and status["message"] == ""
    broker = cluster.wait_ready("broker", name, "False", "PodsNotReady")
    # The operator made no certificate of its own, and left the user's as it was.
    assert cluster.get("secret", f"{name}-ca") is None
    assert cluster.get("secret", f"{name}-tls") is None
    assert secret_bytes(cluster, "byo-cert", "tls.crt") == leaf.cert_pem
    cluster.delete("broker", name)


# Only the schema of cert-manager's Certificate kind (cert-manager.io/v1), reduced to what
# the API server needs to store one: cert-manager's controller cannot run against this
# API server (no pods run here), so nothing issues the certificate; the test writes the
# Secret as cert-manager would. A minimal stand-in for cert-manager's own CRD.
def schemaless_crd(group: str, kind: str, plural: str, singular: str) -> dict:
    """A namespaced v1 CRD of another project's kind: its names, and no schema to check."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
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


MINIMAL_CERTIFICATE_CRD = schemaless_crd(
    "cert-manager.io", "Certificate", "certificates", "certificate"
)


def test_with_an_issuer_the_operator_asks_cert_manager_for_the_certificate(
    cluster: Cluster,
) -> None:
    name = "issued"
    manifest = broker_manifest(tls={"issuerRef": {"name": "internal", "kind": "ClusterIssuer"}})
    manifest["metadata"]["name"] = name
    # Without cert-manager the status says what is missing.
    cluster.apply(manifest)
    broker = cluster.wait_ready("broker", name, "False", "CertificateNotReady")
    assert "install cert-manager" in ready_condition(broker)["message"]

    cluster.plane.apply([MINIMAL_CERTIFICATE_CRD])
    cluster.plane.kubectl(
        "wait", "--for", "condition=Established", "--timeout", "60s",
        "crd/certificates.cert-manager.io",
    )  # fmt: skip
    certificate = wait_for(
        lambda: cluster.get("certificates.cert-manager.io", f"{name}-tls"),
        "the Certificate",
        deadline_s=DEADLINE_S,
    )
    # The chart's RBAC grants what the operator does to Certificates (known once installed).
    for verb, answer in (("create", "yes"), ("patch", "yes"), ("delete", "no")):
        result = cluster.plane.kubectl(
            "auth", "can-i", verb, "certificates.cert-manager.io", "-n", NAMESPACE,
            kubeconfig=cluster.operator_kubeconfig, check=False,
        )  # fmt: skip
        assert result.stdout.strip() == answer, (verb, result.stdout, result.stderr)
    uid = cluster.get("broker", name)["metadata"]["uid"]
    (owner,) = certificate["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("Broker", uid)
    body = certificate["spec"]
    assert body["secretName"] == f"{name}-tls"
    assert body["issuerRef"] == {
        "name": "internal",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert {
        name,
        f"{name}.{NAMESPACE}.svc.cluster.local",
        f"{name}-a.{NAMESPACE}.svc",
        f"*.{name}-a-pods.{NAMESPACE}.svc.cluster.local",
    } <= set(body["dnsNames"])
    assert {"server auth", "client auth"} <= set(body["usages"])
    broker = cluster.wait_ready("broker", name, "False", "CertificateNotReady")
    assert f"waiting for cert-manager to issue {name}-tls" in ready_condition(broker)["message"]
    stateful_set = cluster.get("statefulset", f"{name}-a")
    (volume,) = [
        v for v in stateful_set["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls"
    ]
    assert volume["secret"]["secretName"] == f"{name}-tls"

    # cert-manager's word on why it has not issued yet reaches the Broker's status.
    cluster.plane.kubectl(
        "patch", "certificates.cert-manager.io", f"{name}-tls", "-n", NAMESPACE,
        "--type", "merge", "-p", json.dumps({"status": {"conditions": [{
            "type": "Ready", "status": "False", "reason": "Pending",
            "message": "Issuing certificate as Secret does not exist",
        }]}}),
    )  # fmt: skip
    wait_for(
        lambda: (
            "cert-manager says: Issuing certificate as Secret does not exist"
            in ready_condition(cluster.get("broker", name)).get("message", "")
        ),
        "cert-manager's condition in the Broker's status",
        deadline_s=DEADLINE_S,
    )

    # What cert-manager would write once its issuer signed the request.
    now = datetime.datetime.now(datetime.UTC)
    issuer_ca = new_ca("internal", NAMESPACE, now)
    wanted = certificate_contents(
        BrokerSpec.from_manifest(manifest["spec"]), name, NAMESPACE, "cluster.local"
    )
    leaf = issue_leaf(issuer_ca, name, wanted, now)
    cluster.apply(
        tls_secret_manifest(
            f"{name}-tls",
            {"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem, "ca.crt": issuer_ca.cert_pem},
        )
    )
    cluster.wait_ready("broker", name, "False", "PodsNotReady")
    status = tls_status(cluster, name)
    assert status["source"] == "cert-manager" and status["message"] == ""
    assert status["notAfter"] == x509.load_pem_x509_certificate(
        leaf.cert_pem
    ).not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    # The operator left cert-manager's Secret alone and made no CA.
    assert secret_bytes(cluster, f"{name}-tls", "tls.crt") == leaf.cert_pem
    assert cluster.get("secret", f"{name}-ca") is None
    cluster.delete("broker", name)


# A stand-in for the Prometheus Operator's PodMonitor CRD: its group, version and names,
# and no schema (the operator's PodMonitor is checked field by field below).
STAND_IN_POD_MONITOR_CRD = schemaless_crd(
    "monitoring.coreos.com", "PodMonitor", "podmonitors", "podmonitor"
)


def test_probes_ask_the_health_service_and_a_pod_monitor_follows_the_spec(
    cluster: Cluster,
) -> None:
    monitored = broker_manifest(metrics={"podMonitor": True})
    monitored["metadata"]["name"] = "monitored"
    cluster.apply(monitored)
    stateful_set = wait_for(
        lambda: cluster.get("statefulset", "monitored-a"), "the StatefulSet", deadline_s=DEADLINE_S
    )
    (container,) = stateful_set["spec"]["template"]["spec"]["containers"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == 8081
    assert {"name": "metrics", "containerPort": 5557, "protocol": "TCP"} in container["ports"]

    def pod_monitor_status() -> str:
        broker = cluster.get("broker", "monitored") or {}
        return (broker.get("status") or {}).get("podMonitor", "")

    # Without the Prometheus Operator's CRDs the Broker says why it has no PodMonitor.
    missing = wait_for(pod_monitor_status, "status.podMonitor", deadline_s=DEADLINE_S)
    assert "no monitoring.coreos.com/v1 PodMonitor kind" in missing

    cluster.apply(STAND_IN_POD_MONITOR_CRD)
    cluster.plane.kubectl(
        "wait", "--for", "condition=Established", "--timeout", "60s",
        "crd/podmonitors.monitoring.coreos.com",
    )  # fmt: skip
    # Any change of the spec reconciles the Broker again.
    cluster.merge_patch("broker", "monitored", {"spec": {"defaultReadQueues": 16}})
    monitor = wait_for(
        lambda: cluster.get("podmonitor", "monitored"), "the PodMonitor", deadline_s=DEADLINE_S
    )
    assert monitor["spec"]["selector"] == {"matchLabels": {"skiff.io/broker": "monitored"}}
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics"}]
    (owner,) = monitor["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Broker", "monitored")
    # Made, but Prometheus cannot reach /metrics until the spec names it.
    unreachable = wait_for(
        lambda: pod_monitor_status() if pod_monitor_status().startswith("PodMonitor") else "",
        "the status",
        deadline_s=DEADLINE_S,
    )
    assert "spec.metrics.allowFrom names no one" in unreachable
    prometheus = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    named = {"podMonitor": True, "allowFrom": [prometheus]}
    cluster.merge_patch("broker", "monitored", {"spec": {"metrics": named}})
    wait_for(
        lambda: (
            pod_monitor_status() == "PodMonitor monitored scrapes port metrics of every broker pod"
        ),
        "the status once a scraper is named",
        deadline_s=DEADLINE_S,
    )

    cluster.merge_patch("broker", "monitored", {"spec": {"metrics": {"podMonitor": False}}})
    wait_for(
        lambda: cluster.get("podmonitor", "monitored") is None,
        "the PodMonitor to go",
        deadline_s=DEADLINE_S,
    )
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
        wait_for(
            lambda kind=kind, name=name: cluster.get(kind, name),
            f"{kind} {name}",
            deadline_s=DEADLINE_S,
        )
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
        lambda: (
            [
                o["name"]
                for o in cluster.get("lease", "cascade-a")["metadata"].get("ownerReferences", [])
            ]
            == ["cascade"]
        ),
        "the operator to make the Broker own its group's Lease",
        deadline_s=DEADLINE_S,
    )
    children.append(("lease", "cascade-a"))
    with running_controllers(cluster.plane, "garbage-collector-controller"):
        cluster.delete("broker", "cascade")
        for kind, name in children:
            wait_for(
                lambda kind=kind, name=name: cluster.get(kind, name) is None,
                f"the garbage collector to delete {kind} {name}",
                deadline_s=DEADLINE_S,
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
        wait_for(
            lambda name=name: cluster.get("statefulset", f"{name}-a"),
            f"{name}-a",
            deadline_s=DEADLINE_S,
        )
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
                deadline_s=DEADLINE_S,
            )
        cluster.delete("broker", "keep", "drop")
        wait_for(
            lambda: cluster.get("persistentvolumeclaim", "data-drop-a-0") is None,
            "the claim of the Broker that asked for it to be deleted",
            deadline_s=DEADLINE_S,
        )
        wait_for(
            lambda: cluster.get("statefulset", "keep-a") is None,
            "keep-a to go",
            deadline_s=DEADLINE_S,
        )
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
