"""The Helm chart: lint clean, its output accepted by the API server, the examples apply."""

from __future__ import annotations

import json
import subprocess

import yaml
from tests.support.kube_control_plane import REPO_ROOT, ControlPlane

from skiff_operator.metrics_access import parse_allow_from

CHART = str(REPO_ROOT / "charts" / "skiff")


def test_helm_lint_is_clean(control_plane: ControlPlane) -> None:
    output = control_plane.helm("lint", "--strict", CHART)
    assert "0 chart(s) failed" in output
    assert "[WARNING]" not in output and "[ERROR]" not in output


def test_values_schema_refuses_unknown_values(control_plane: ControlPlane) -> None:
    result = subprocess.run(
        [control_plane.tool("helm"), "template", "x", CHART, "--set", "operator.replicas=3"],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "replicas" in result.stderr


def test_helm_template_applies_with_server_side_dry_run(crds: ControlPlane) -> None:
    crds.kubectl("create", "namespace", "chart-dry-run")
    rendered = crds.helm(
        "template", "skiff", CHART,
        "--namespace", "chart-dry-run",
        "--include-crds",
        "--set", "examples.enabled=true",
        "--set", "localStorageClass.create=true",
        "--set", "operator.watchNamespaces={chart-dry-run}",
        "--set", "examples.broker.externalAccess.type=NodePort",
        "--set", "examples.broker.externalAccess.nodePortBase=30911",
        "--set", "examples.broker.podMonitor=true",
        "--set", "examples.broker.metricsAllowFrom[0].namespaceSelector.matchLabels.team=obs",
        "--set", "examples.broker.metricsAllowFrom[0].podSelector.matchLabels.app=prometheus",
    )  # fmt: skip
    kinds = sorted({doc["kind"] for doc in yaml.safe_load_all(rendered) if doc})
    assert kinds == [
        "Broker",
        "ConfigMap",
        "CustomResourceDefinition",
        "Deployment",
        "NetworkPolicy",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "StorageClass",
        "Topic",
    ]
    output = crds.kubectl(
        "apply", "--server-side", "--dry-run=server", "-n", "chart-dry-run", "-f", "-",
        input=rendered,
    ).stdout  # fmt: skip
    assert "deployment.apps/skiff-operator serverside-applied (server dry run)" in output
    assert "broker.skiff.io/skiff serverside-applied (server dry run)" in output
    (broker,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Broker"]
    assert broker["spec"]["externalAccess"] == {"type": "NodePort", "nodePortBase": 30911}
    assert broker["spec"]["metrics"] == {
        "podMonitor": True,
        "allowFrom": [
            {
                "namespaceSelector": {"matchLabels": {"team": "obs"}},
                "podSelector": {"matchLabels": {"app": "prometheus"}},
            }
        ],
    }
    # A dry run stores nothing.
    assert crds.get("deployment", "skiff-operator", "chart-dry-run") is None


def test_the_dashboard_is_a_configmap_for_the_grafana_sidecar(control_plane: ControlPlane) -> None:
    (config_map,) = [d for d in rendered_kinds(control_plane) if d["kind"] == "ConfigMap"]
    assert config_map["metadata"]["name"] == "skiff-dashboard"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["skiff-broker.json"])
    queries = {
        panel["title"]: " ".join(t["expr"] for t in panel["targets"])
        for panel in dashboard["panels"]
    }
    for metric in (
        "rocketmq_messages_in_total",
        "rocketmq_messages_out_total",
        "rocketmq_throughput_in_total",
        "rocketmq_throughput_out_total",
        "rocketmq_consumer_lag_messages",
        "skiff_store_append_duration_seconds_bucket",
        "skiff_store_flush_duration_seconds_bucket",
    ):
        assert any(metric in q for q in queries.values()), metric
    latencies = queries["Append latency (p50, p99)"]
    assert "histogram_quantile(0.5," in latencies and "histogram_quantile(0.99," in latencies
    assert not [
        d
        for d in rendered_kinds(control_plane, "--set", "dashboard.enabled=false")
        if d["kind"] == "ConfigMap"
    ]


def rendered_kinds(control_plane: ControlPlane, *values: str) -> list[dict]:
    rendered = control_plane.helm(
        "template", "skiff", CHART, "--namespace", "skiff-system", *values
    )  # fmt: skip
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def test_namespaced_rbac_is_a_role_per_watched_namespace_and_nothing_cluster_wide(
    crds: ControlPlane,
) -> None:
    documents = rendered_kinds(crds, "--set", "operator.watchNamespaces={team-a,team-b}")
    kinds = sorted(d["kind"] for d in documents)
    assert kinds == [
        # The dashboard, in the release namespace: it holds no rights.
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "ServiceAccount",
    ]
    roles = {d["metadata"]["namespace"]: d for d in documents if d["kind"] == "Role"}
    assert sorted(roles) == ["team-a", "team-b"]
    (cluster_role,) = [
        d
        for d in rendered_kinds(crds, "--set", "rbac.clusterWide=true")
        if d["kind"] == "ClusterRole"
    ]
    # The same rights, less the one cluster-scoped read (node addresses).
    nodes = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}
    assert nodes in cluster_role["rules"]
    for role in roles.values():
        assert role["rules"] == [r for r in cluster_role["rules"] if r != nodes]
    for binding in (d for d in documents if d["kind"] == "RoleBinding"):
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "skiff-operator", "namespace": "skiff-system"}
        ]
    # The API server accepts them (kubectl needs the namespaces to exist for a dry run).
    for namespace in roles:
        crds.kubectl("create", "namespace", namespace)
    output = crds.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-",
        input=yaml.safe_dump_all([d for d in documents if d["kind"].startswith("Role")]),
    ).stdout  # fmt: skip
    assert "role.rbac.authorization.k8s.io/skiff-operator serverside-applied" in output


def test_by_default_the_operator_is_namespaced_to_its_release(control_plane: ControlPlane) -> None:
    documents = rendered_kinds(control_plane)
    rights = sorted(
        (d["kind"], d["metadata"].get("namespace"))
        for d in documents
        if d["kind"] in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
    )
    assert rights == [("Role", "skiff-system"), ("RoleBinding", "skiff-system")]
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SKIFF_OPERATOR_NAMESPACES"] == "skiff-system"
    # Watching every namespace is the opt-in that brings the ClusterRole.
    everywhere = rendered_kinds(control_plane, "--set", "rbac.clusterWide=true")
    assert {"ClusterRole", "ClusterRoleBinding"} <= {d["kind"] for d in everywhere}
    (deployment,) = [d for d in everywhere if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "SKIFF_OPERATOR_NAMESPACES" not in {e["name"] for e in container["env"]}


def test_the_operator_pod_admits_only_its_health_port(control_plane: ControlPlane) -> None:
    documents = rendered_kinds(control_plane)
    (policy,) = [d for d in documents if d["kind"] == "NetworkPolicy"]
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"] == template["metadata"]["labels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    (container,) = template["spec"]["containers"]
    served = {p["name"] for p in container["ports"]}
    assert rule == {"ports": [{"protocol": "TCP", "port": "health"}]}
    assert served == {"health"}
    off = rendered_kinds(control_plane, "--set", "networkPolicy.enabled=false")
    assert "NetworkPolicy" not in {d["kind"] for d in off}


def test_kubectl_apply_of_the_examples(crds: ControlPlane) -> None:
    crds.kubectl("create", "namespace", "examples")
    examples = REPO_ROOT / "examples"
    output = crds.kubectl(
        "apply", "-n", "examples", "-f", str(examples / "broker.yaml"),
        "-f", str(examples / "topic.yaml"), "-f", str(examples / "user.yaml"),
    ).stdout  # fmt: skip
    assert "broker.skiff.io/skiff created" in output
    assert "user.skiff.io/billing created" in output
    user = crds.get("skuser", "billing", "examples")
    assert user is not None
    # Filled in by the API server from the CRD's defaults.
    assert user["spec"]["acl"][0]["decision"] == "Allow"
    assert user["spec"]["super"] is False
    assert "topic.skiff.io/orders created" in output
    assert "topic.skiff.io/payments created" in output
    stored = crds.get("topic", "payments", "examples")
    assert stored is not None
    assert stored["spec"]["topicName"] == "Payments_FIFO"
    assert stored["spec"]["deletionPolicy"] == "Retain"
    output = crds.kubectl("apply", "-n", "examples", "-f", str(examples / "cluster.yaml")).stdout
    assert "broker.skiff.io/orders created" in output
    cluster = crds.get("broker", "orders", "examples")
    assert cluster is not None
    assert cluster["spec"]["externalAccess"]["nodePortBase"] == 30911


def test_the_chart_names_the_scrapers_of_every_brokers_metrics(
    control_plane: ControlPlane,
) -> None:
    def operator_env(*values: str) -> dict[str, str]:
        (deployment,) = [
            d for d in rendered_kinds(control_plane, *values) if d["kind"] == "Deployment"
        ]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e.get("value", "") for e in container["env"]}

    # By default nobody: the operator gets no scrapers and the brokers bind loopback.
    assert "SKIFF_OPERATOR_METRICS_ALLOW_FROM" not in operator_env()
    env = operator_env(
        "--set", "metrics.allowFrom[0].namespaceSelector.matchLabels.team=obs",
        "--set", "metrics.allowFrom[0].podSelector.matchLabels.app=prometheus",
    )  # fmt: skip
    assert parse_allow_from(env["SKIFF_OPERATOR_METRICS_ALLOW_FROM"]) == (
        {
            "namespaceSelector": {"matchLabels": {"team": "obs"}},
            "podSelector": {"matchLabels": {"app": "prometheus"}},
        },
    )
