"""Least privilege against the real API server: the chart's default install, the brokers' Role.

The chart's default install is namespaced: a Role in the release namespace, nothing
cluster-wide. Two Brokers share that namespace; their brokers' ServiceAccounts, Roles
and RoleBindings are the operator's rendering, applied with the operator's own token
(Kubernetes lets it grant only what it holds, so this also checks the chart gives it
enough). Each broker then calls the API server as a broker does (the broker's own
client, with a token of its ServiceAccount from the TokenRequest API): its own pod and
Lease it may write, the other Broker's it may not (403).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.support.kube_control_plane import REPO_ROOT, ControlPlane, write_kubeconfig

from skiff_broker.cluster.kube_client import Conflict, KubeClient, KubeError
from skiff_operator.broker_spec import BrokerSpec
from skiff_operator.rendering import BrokerIdentity, render_cluster

HOME = "rbac-home"
ELSEWHERE = "rbac-elsewhere"
LAYOUT = {"groups": 1, "replicasPerGroup": 2}


@dataclasses.dataclass
class Install:
    plane: ControlPlane
    documents: list[dict]
    operator_kubeconfig: Path
    work_dir: Path

    def token_kubeconfig(self, account: str, namespace: str) -> Path:
        token = self.plane.kubectl(
            "create", "token", account, "-n", namespace, "--duration", "1h"
        ).stdout.strip()  # fmt: skip
        path = self.work_dir / f"{account}.kubeconfig"
        return write_kubeconfig(path, self.plane.server, self.plane.ca_path, token, account)

    def operator_can(self, verb: str, resource: str, namespace: str = HOME) -> str:
        result = self.plane.kubectl(
            "auth", "can-i", verb, resource, "-n", namespace,
            kubeconfig=self.operator_kubeconfig, check=False,
        )  # fmt: skip
        return result.stdout.strip()


@pytest.fixture(scope="module")
def install(crds: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    """``helm template`` with no values at all, applied (all but the Deployment)."""
    work_dir = tmp_path_factory.mktemp("broker-rbac")
    for namespace in (HOME, ELSEWHERE):
        crds.kubectl("create", "namespace", namespace)
    rendered = crds.helm("template", "skiff", str(REPO_ROOT / "charts" / "skiff"), "-n", HOME)
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    for document in documents:
        document["metadata"].setdefault("namespace", HOME)
    crds.apply([d for d in documents if d["kind"] != "Deployment"])
    shared = Install(crds, documents, work_dir / "none", work_dir)
    shared.operator_kubeconfig = shared.token_kubeconfig("skiff-operator", HOME)
    yield shared


def test_the_default_install_is_namespaced_to_its_release_namespace(install: Install) -> None:
    kinds = sorted(d["kind"] for d in install.documents)
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds
    rights = [d for d in install.documents if d["kind"] in ("Role", "RoleBinding")]
    assert sorted((d["kind"], d["metadata"]["namespace"]) for d in rights) == [
        ("Role", HOME),
        ("RoleBinding", HOME),
    ]
    (deployment,) = [d for d in install.documents if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # The operator watches what it may act on: the release namespace.
    assert env["SKIFF_OPERATOR_NAMESPACES"] == HOME

    can = install.operator_can
    assert can("patch", "statefulsets.apps") == "yes"
    assert can("watch", "brokers.skiff.io") == "yes"
    for verb, resource in (("patch", "statefulsets.apps"), ("watch", "brokers.skiff.io")):
        assert can(verb, resource, ELSEWHERE) == "no", f"{verb} {resource} in {ELSEWHERE}"
    assert can("list", "nodes") == "no"
    assert can("list", "brokers.skiff.io", "default") == "no"
    # Never used by the operator's code, so not granted.
    for verb, resource in (
        ("delete", "secrets"),
        ("list", "secrets"),
        ("get", "pods"),
        ("update", "pods"),
        ("watch", "leases.coordination.k8s.io"),
        ("delete", "leases.coordination.k8s.io"),
        ("delete", "roles.rbac.authorization.k8s.io"),
        ("escalate", "roles.rbac.authorization.k8s.io"),
        ("bind", "roles.rbac.authorization.k8s.io"),
    ):
        assert can(verb, resource) == "no", f"{verb} {resource}"


def make_broker(install: Install, name: str) -> BrokerIdentity:
    install.plane.apply(
        [
            {
                "apiVersion": "skiff.io/v1alpha1",
                "kind": "Broker",
                "metadata": {"name": name, "namespace": HOME},
                "spec": LAYOUT,
            }
        ]
    )
    stored = install.plane.get("broker", name, HOME)
    assert stored is not None
    return BrokerIdentity(name, HOME, stored["metadata"]["uid"])


def pod(name: str, account: str) -> dict:
    """A broker pod's object; no kubelet runs it (the tests call as its broker would)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": HOME},
        "spec": {
            "serviceAccountName": account,
            "automountServiceAccountToken": False,
            "containers": [{"name": "broker", "image": "skiff:test"}],
        },
    }


def lease(name: str, holder: str) -> dict:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": {"skiff.io/cluster": name.rsplit("-", 1)[0]}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


def refused(call: object, *args: object) -> str:
    """The API server's refusal of ``call(*args)`` (a 403 from RBAC), as the broker sees it."""
    try:
        call(*args)  # type: ignore[operator]
    except Conflict as exc:
        pytest.fail(f"expected a refusal, got a conflict: {exc}")
    except KubeError as exc:
        assert "(403)" in str(exc), exc
        return str(exc)
    pytest.fail(f"{getattr(call, '__name__', call)}{args} was allowed")


def test_a_brokers_account_writes_only_its_own_brokers_pods_and_leases(install: Install) -> None:
    plane = install.plane
    north, south = make_broker(install, "north"), make_broker(install, "south")
    for broker in (north, south):
        access = render_cluster(broker, BrokerSpec.from_manifest(LAYOUT))
        # Applied as the operator applies it, with its token: the chart's Role suffices.
        plane.kubectl(
            "apply", "--server-side", "--field-manager", "skiff-operator", "-f", "-",
            input=yaml.safe_dump_all([access.service_account, access.role, access.role_binding]),
            kubeconfig=install.operator_kubeconfig,
        )  # fmt: skip
        plane.apply(
            [
                pod(f"{broker.name}-a-0", f"{broker.name}-broker"),
                pod(f"{broker.name}-a-1", f"{broker.name}-broker"),
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"{broker.name}-endpoints", "namespace": HOME},
                    "data": {},
                },
            ]
        )
    apis = {
        broker.name: KubeClient.from_environment(
            str(install.token_kubeconfig(f"{broker.name}-broker", HOME))
        )
        for broker in (north, south)
    }
    mine, theirs = apis["north"], apis["south"]
    # Each group's first broker creates its Lease, as the brokers do.
    mine.create_lease(HOME, lease("north-a", "north-a-0"))
    theirs.create_lease(HOME, lease("south-a", "south-a-0"))

    # Its own pod and Lease: allowed.
    mine.label_pod(HOME, "north-a-1", {"skiff.io/role": "master"})
    labelled = plane.get("pod", "north-a-1", HOME)
    assert labelled is not None and labelled["metadata"]["labels"]["skiff.io/role"] == "master"
    own = mine.get_lease(HOME, "north-a")
    own["spec"]["holderIdentity"] = "north-a-1"
    mine.replace_lease(HOME, own)
    mine.request(
        "PATCH",
        f"/apis/coordination.k8s.io/v1/namespaces/{HOME}/leases/north-a",
        {"spec": {"holderIdentity": "north-a-0"}},
        content_type="application/merge-patch+json",
    )
    assert (plane.get("lease", "north-a", HOME) or {})["spec"]["holderIdentity"] == "north-a-0"
    assert mine.get_config_map(HOME, "north-endpoints")["metadata"]["name"] == "north-endpoints"

    # The other Broker's pod, Lease and endpoints map: refused, and nothing changed.
    refused(mine.label_pod, HOME, "south-a-0", {"skiff.io/role": "master"})
    refused(mine.label_pod, HOME, "south-a-1", {"skiff.io/broker": "north"})
    stolen = lease("south-a", "north-a-0")
    stolen["metadata"]["resourceVersion"] = (plane.get("lease", "south-a", HOME) or {})["metadata"][
        "resourceVersion"
    ]
    refused(mine.replace_lease, HOME, stolen)
    refused(
        mine.request,
        "PATCH",
        f"/apis/coordination.k8s.io/v1/namespaces/{HOME}/leases/south-a",
        {"spec": {"holderIdentity": "north-a-0"}},
        "application/merge-patch+json",
    )
    refused(mine.get_lease, HOME, "south-a")
    refused(mine.get_config_map, HOME, "south-endpoints")
    # Deleting is nobody's: not even its own Lease.
    refused(
        mine.request, "DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{HOME}/leases/north-a"
    )
    assert (plane.get("lease", "south-a", HOME) or {})["spec"]["holderIdentity"] == "south-a-0"
    victim = plane.get("pod", "south-a-0", HOME) or {}
    assert "skiff.io/role" not in (victim["metadata"].get("labels") or {})
    # Creating cannot be narrowed by name, but an existing Lease is not taken by creating.
    with pytest.raises(Conflict):
        mine.create_lease(HOME, lease("south-a", "north-a-0"))
    # Listing by label cannot be narrowed either: a broker reads its cluster's Leases.
    assert {item["metadata"]["name"] for item in mine.list_leases(HOME, "skiff.io/cluster")} >= {
        "north-a",
        "south-a",
    }
    # Nothing in another namespace.
    refused(mine.list_leases, ELSEWHERE, "skiff.io/cluster")
