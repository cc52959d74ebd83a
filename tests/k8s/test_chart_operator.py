"""The operator exactly as the chart's Deployment runs it: its command, its environment.

The container's command and environment come from ``helm template``; the process runs
here with the token of the chart's ServiceAccount. Two things differ from a pod and are
replaced: the in-cluster credentials (a kubeconfig with the same token instead of the
mounted token file) and the pod's network (the liveness port becomes a free loopback port).
It runs three times: with no values at all (the default: a Role in the release namespace,
the one namespace watched), with ``operator.watchNamespaces`` (a Role per watched
namespace) and with the opt-in ``rbac.clusterWide=true`` (a ClusterRole), each install in
namespaces of its own so that the rights of one cannot help the other.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from tests.support.kube_control_plane import REPO_ROOT, ControlPlane, free_port, write_kubeconfig
from tests.support.waiting import wait_for

BROKER_IMAGE = "registry.test/skiff/broker"


def handled(broker: dict | None) -> bool:
    """The operator wrote the Broker's Ready condition (it does for every Broker it serves)."""
    conditions = ((broker or {}).get("status") or {}).get("conditions") or []
    return any(condition.get("type") == "Ready" for condition in conditions)


def broker_watches(plane: ControlPlane) -> dict[str, int]:
    """Open WATCH requests on Brokers by scope, from the API server's own metrics."""
    metrics = plane.kubectl("get", "--raw", "/metrics").stdout
    counts: dict[str, int] = {}
    for line in metrics.splitlines():
        if not line.startswith("apiserver_longrunning_requests{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.partition("}")[0]))
        if (labels.get("resource"), labels.get("verb")) == ("brokers", "WATCH"):
            scope = labels.get("scope", "")
            counts[scope] = counts.get(scope, 0) + int(float(line.rsplit(" ", 1)[1]))
    return counts


@pytest.mark.parametrize("install", ["default", "listed", "cluster-wide"])
def test_the_chart_deployment_runs_the_operator(
    crds: ControlPlane, tmp_path: Path, install: str
) -> None:
    cluster_wide = install == "cluster-wide"
    prefix = {"default": "home", "listed": "scoped", "cluster-wide": "chart"}[install]
    release_namespace, watched, not_watched = (
        f"{prefix}-system",
        # By default the operator watches its own namespace.
        f"{prefix}-system" if install == "default" else f"{prefix}-run",
        f"{prefix}-not-watched",
    )
    for namespace in {release_namespace, watched, not_watched}:
        crds.kubectl("create", "namespace", namespace)
    values = ["--set", f"operator.brokerImage.repository={BROKER_IMAGE}"]
    if install != "default":
        values += ["--set", f"operator.watchNamespaces={{{watched}}}"]
    if cluster_wide:
        values += ["--set", "rbac.clusterWide=true"]
    rendered = crds.helm(
        "template", prefix, str(REPO_ROOT / "charts" / "skiff"),
        "--namespace", release_namespace, *values,
    )  # fmt: skip
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    cluster_scoped = {d["kind"] for d in documents} & {"ClusterRole", "ClusterRoleBinding"}
    assert bool(cluster_scoped) is cluster_wide
    crds.apply([d for d in documents if d["kind"] != "Deployment"])
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    token = crds.kubectl(
        "create", "token", pod["serviceAccountName"], "-n", release_namespace
    ).stdout.strip()  # fmt: skip
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", crds.server, crds.ca_path, token, "chart-operator"
    )

    def can(verb: str, resource: str, namespace: str) -> str:
        result = crds.kubectl(
            "auth", "can-i", verb, resource, "-n", namespace, kubeconfig=kubeconfig, check=False
        )
        return result.stdout.strip()

    assert can("patch", "statefulsets.apps", watched) == "yes"
    assert can("create", "networkpolicies.networking.k8s.io", watched) == "yes"
    assert can("list", "nodes", watched) == ("yes" if cluster_wide else "no")
    assert can("list", "brokers.skiff.io", not_watched) == ("yes" if cluster_wide else "no")

    env = {entry["name"]: entry["value"] for entry in container["env"]}
    probe = container["livenessProbe"]["httpGet"]
    health_port = next(p["containerPort"] for p in container["ports"] if p["name"] == probe["port"])
    local_port = free_port()
    env["SKIFF_OPERATOR_LIVENESS"] = env["SKIFF_OPERATOR_LIVENESS"].replace(
        f"0.0.0.0:{health_port}", f"127.0.0.1:{local_port}"
    )
    bin_dir = Path(sys.executable).parent
    base = {k: v for k, v in os.environ.items() if not k.startswith("SKIFF_")}
    log_path = tmp_path / "operator.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(bin_dir / container["command"][0]), *container.get("args", [])],
            # This checkout's code, not whatever the console script's install points at.
            env={
                **base,
                **env,
                "KUBECONFIG": str(kubeconfig),
                "PYTHONPATH": os.pathsep.join(sys.path),
            },
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    try:
        broker = {
            "apiVersion": "skiff.io/v1alpha1",
            "kind": "Broker",
            "metadata": {"name": "charted"},
            "spec": {},
        }
        crds.apply([{**broker, "metadata": {"name": "charted", "namespace": watched}}])
        crds.apply([{**broker, "metadata": {"name": "ignored", "namespace": not_watched}}])
        stateful_set = wait_for(
            lambda: crds.get("statefulset", "charted-a", watched),
            "the operator to render",
            deadline_s=90.0,
        )
        assert crds.get("networkpolicy", "charted-a", watched) is not None
        image = stateful_set["spec"]["template"]["spec"]["containers"][0]["image"]
        chart = yaml.safe_load((REPO_ROOT / "charts" / "skiff" / "Chart.yaml").read_text())
        assert image == f"{BROKER_IMAGE}:{chart['appVersion']}"

        url = f"http://127.0.0.1:{local_port}{probe['path']}"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200

        # Only the watched namespace is the operator's business: it watches Brokers in
        # that namespace, and nowhere cluster-wide (the API server counts open watches).
        watches = broker_watches(crds)
        assert watches.get("namespace", 0) >= 1, watches
        assert watches.get("cluster", 0) == 0, watches

        # Node ports need a host for clients outside; without the right to read nodes
        # the Broker's status tells the user to name it.
        crds.apply(
            [
                {
                    **broker,
                    "metadata": {"name": "edge", "namespace": watched},
                    "spec": {"externalAccess": {"type": "NodePort"}},
                }
            ]
        )

        def external_note() -> str:
            conditions = ((crds.get("broker", "edge", watched) or {}).get("status") or {}).get(
                "conditions"
            ) or []
            message = next((c["message"] for c in conditions if c["type"] == "Ready"), "")
            return message if "advertisedHost" in message else ""

        if cluster_wide:
            wait_for(
                lambda: crds.get("service", "edge-a-external", watched),
                "the external Service",
                deadline_s=90.0,
            )
        else:
            note = wait_for(external_note, "the status to ask for advertisedHost", deadline_s=90.0)
            assert "may not read the nodes' addresses" in note
        # "edge" was created after "ignored": once the operator has handled it, an operator
        # that also served the other namespace would have handled "ignored" as well.
        wait_for(
            lambda: handled(crds.get("broker", "edge", watched)),
            "the operator to write edge's status",
            deadline_s=90.0,
        )
        ignored = crds.get("broker", "ignored", not_watched)
        assert not handled(ignored), ignored
        assert not ignored["metadata"].get("finalizers"), ignored
        assert crds.get("statefulset", "ignored-a", not_watched) is None
        assert process.poll() is None, "the operator exited"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"the operator did not stop on SIGTERM:\n{log_path.read_text()[-3000:]}")
    assert code == 0, log_path.read_text()[-3000:]
    # Logs are JSON lines (the chart's logFormat).
    records = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    assert records, "the operator logged nothing"
