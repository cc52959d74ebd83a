"""The cluster side of rendering and status: brokers' RBAC, Services, external access,
the status read from the groups' Leases, the restart order and the drain bookkeeping.
All pure functions of their input."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.client.admin import MessageType, Permission, Topic
from skiff_operator.broker_spec import BrokerSpec
from skiff_operator.cluster_status import external_endpoint, read_lease
from skiff_operator.rendering import BrokerIdentity, render_broker, render_cluster
from skiff_operator.rolling_restart import REVISION_LABEL, next_restart
from skiff_operator.topic_handlers import on_group

ROOT = Path(__file__).resolve().parents[3]
BROKER = BrokerIdentity(name="orders", namespace="shop", uid="0b6f6c1e-1111-2222-3333-444455556666")
NOW = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)


def spec(**fields: object) -> BrokerSpec:
    return BrokerSpec.from_manifest(fields)


def rights_of(role: dict) -> set[tuple[str, str, str, str]]:
    """(API group, resource, verb, name) of every right the Role grants; name "*": any."""
    return {
        (group, resource, verb, name)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or ["*"]
    }


def test_brokers_get_their_own_account_with_exactly_the_lease_rights() -> None:
    cluster = render_cluster(BROKER, spec(groups=2, replicasPerGroup=2))
    assert [m["kind"] for m in cluster.all()] == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Service",
    ]
    for manifest in cluster.all():
        assert manifest["metadata"]["namespace"] == "shop"
        (owner,) = manifest["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("Broker", BROKER.uid, True)
    assert cluster.service_account["metadata"]["name"] == "orders-broker"
    leases = ("orders-a", "orders-b")
    pods = ("orders-a-0", "orders-a-1", "orders-b-0", "orders-b-1")
    assert rights_of(cluster.role) == {
        # Listing by label cannot be narrowed by name; creating cannot either.
        ("coordination.k8s.io", "leases", "list", "*"),
        ("coordination.k8s.io", "leases", "create", "*"),
        *(
            ("coordination.k8s.io", "leases", verb, lease)
            for verb in ("get", "update", "patch")
            for lease in leases
        ),
        *(("", "pods", "patch", pod) for pod in pods),
        ("", "configmaps", "get", "orders-endpoints"),
    }
    binding = cluster.role_binding
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "orders-broker",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "orders-broker", "namespace": "shop"}
    ]
    # Only the broker pods mount a token (they ask for it), not anything else using it.
    assert cluster.service_account["automountServiceAccountToken"] is False


def test_the_brokers_role_follows_the_groups_and_replicas() -> None:
    small = rights_of(render_cluster(BROKER, spec()).role)
    assert ("", "pods", "patch", "orders-a-0") in small
    assert ("", "pods", "patch", "orders-a-1") not in small
    assert ("coordination.k8s.io", "leases", "update", "orders-b") not in small
    grown = rights_of(render_cluster(BROKER, spec(groups=2, replicasPerGroup=3)).role)
    assert ("", "pods", "patch", "orders-b-2") in grown
    assert ("coordination.k8s.io", "leases", "update", "orders-b") in grown


def test_two_brokers_of_a_namespace_share_no_object_they_may_write() -> None:
    other = BrokerIdentity(name="billing", namespace="shop", uid="1c2d3e4f-0000-0000-0000-0000")
    layout = spec(groups=3, replicasPerGroup=3)

    def named(identity: BrokerIdentity) -> set[tuple[str, str, str, str]]:
        return {r for r in rights_of(render_cluster(identity, layout).role) if r[3] != "*"}

    ours, theirs = named(BROKER), named(other)
    assert ours and theirs
    assert {(g, r, n) for g, r, _, n in ours}.isdisjoint({(g, r, n) for g, r, _, n in theirs})
    # What is not narrowed by name only lists or creates: it writes nothing that exists.
    unnamed = {r for r in rights_of(render_cluster(BROKER, layout).role) if r[3] == "*"}
    assert {verb for _, _, verb, _ in unnamed} == {"list", "create"}


def test_the_bootstrap_service_covers_every_pod_of_every_group() -> None:
    service = render_cluster(BROKER, spec()).bootstrap_service
    assert service["metadata"]["name"] == "orders"
    assert service["spec"]["selector"] == {"skiff.io/broker": "orders"}
    # 4.x clients set namesrvAddr to its remoting port; gRPC clients use its gRPC port.
    assert service["spec"]["ports"] == [
        {"name": "grpc", "port": 8081, "targetPort": "grpc"},
        {"name": "remoting", "port": 8080, "targetPort": "remoting"},
    ]
    for group in render_broker(spec(groups=3, replicasPerGroup=2), BROKER):
        pod_labels = group.stateful_set["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()


def test_no_external_service_or_port_unless_asked() -> None:
    (group,) = render_broker(spec(), BROKER)
    assert group.external_service is None
    assert [m["kind"] for m in group.all()].count("Service") == 2
    (container,) = group.stateful_set["spec"]["template"]["spec"]["containers"]
    assert [p["name"] for p in container["ports"]] == ["grpc", "remoting", "ha", "metrics"]
    assert "SKIFF_REMOTING_EXTERNAL_LISTEN" not in group.config_map["data"]


def test_node_port_access_exposes_each_groups_master_on_its_own_port() -> None:
    broker_spec = spec(groups=3, externalAccess={"type": "NodePort", "nodePortBase": 31000})
    groups = render_broker(broker_spec, BROKER)
    for index, group in enumerate(groups):
        service = group.external_service
        assert service is not None
        assert service["metadata"]["name"] == f"{group.name}-external"
        assert service["spec"]["type"] == "NodePort"
        assert service["spec"]["selector"] == group.client_service["spec"]["selector"]
        assert service["spec"]["selector"]["skiff.io/role"] == "master"
        # gRPC first (the endpoints ConfigMap reads the first port for it), then remoting,
        # whose node port Kubernetes picks.
        port, remoting = service["spec"]["ports"]
        assert (port["port"], port["targetPort"], port["nodePort"]) == (
            8082,
            "external",
            31000 + index,
        )
        assert remoting == {
            "name": "remoting",
            "port": 8080,
            "targetPort": "remoting-ext",
            "protocol": "TCP",
        }
        assert group.config_map["data"]["SKIFF_EXTERNAL_LISTEN"] == "0.0.0.0:8082"
        assert group.config_map["data"]["SKIFF_REMOTING_EXTERNAL_LISTEN"] == "0.0.0.0:8083"
        (container,) = group.stateful_set["spec"]["template"]["spec"]["containers"]
        assert {"name": "external", "containerPort": 8082, "protocol": "TCP"} in container["ports"]
        assert {"name": "remoting-ext", "containerPort": 8083, "protocol": "TCP"} in container[
            "ports"
        ]
        assert service in group.all()


def test_load_balancer_access_leaves_ports_to_kubernetes_and_keeps_annotations() -> None:
    annotations = {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
    broker_spec = spec(externalAccess={"type": "LoadBalancer", "annotations": annotations})
    service = render_broker(broker_spec, BROKER)[0].external_service
    assert service is not None
    assert service["spec"]["type"] == "LoadBalancer"
    assert "nodePort" not in service["spec"]["ports"][0]
    assert service["metadata"]["annotations"] == annotations


def test_lease_duration_reaches_the_brokers() -> None:
    data = render_broker(spec(leaseDurationSeconds=30), BROKER)[0].config_map["data"]
    assert data["SKIFF_LEASE_DURATION"] == "30"


def test_the_crd_refuses_settings_for_every_variable_the_operator_renders() -> None:
    """A user's ``settings`` entry must never override what the operator sets per pod."""
    crd = yaml.safe_load((ROOT / "crds" / "skiff.io_brokers.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rules = schema["properties"]["spec"]["properties"]["settings"]["x-kubernetes-validations"]
    forbidden = set(re.findall(r"'(SKIFF_[A-Z_]+)'", rules[1]["rule"]))
    broker_spec = spec(externalAccess={"type": "NodePort"}, telemetry={"otlpEndpoint": "x"})
    (group,) = render_broker(broker_spec, BROKER)
    (container,) = group.stateful_set["spec"]["template"]["spec"]["containers"]
    per_pod = {e["name"] for e in container["env"] if e["name"].startswith("SKIFF_")}
    cluster_wide = {
        "SKIFF_DATA_DIR",
        "SKIFF_LISTEN",
        "SKIFF_BROKER_NAME",
        "SKIFF_ROLE",
        "SKIFF_HA_LISTEN",
        "SKIFF_CLUSTER",
        "SKIFF_LEASE_DURATION",
        "SKIFF_EXTERNAL_LISTEN",
    }
    assert cluster_wide <= group.config_map["data"].keys()
    assert per_pod | cluster_wide <= forbidden
    # The replication secret is the Broker's own Secret; no setting may point elsewhere.
    assert {"SKIFF_HA_SECRET", "SKIFF_HA_SECRET_FILE"} <= forbidden


def test_cluster_rendering_is_pure() -> None:
    first = render_cluster(BROKER, spec()).all()
    first[1]["rules"][0]["verbs"].append("delete")
    first[3]["spec"]["selector"]["extra"] = "x"
    again = render_cluster(BROKER, spec())
    assert "delete" not in again.role["rules"][0]["verbs"]
    assert again.bootstrap_service["spec"]["selector"] == {"skiff.io/broker": "orders"}
    external = spec(groups=2, externalAccess={"type": "NodePort", "nodePortBase": 30100})
    assert [g.all() for g in render_broker(external, BROKER)] == [
        g.all() for g in render_broker(external, BROKER)
    ]


# -- status from the Leases ---------------------------------------------------


def lease(
    holder: str = "orders-a-1",
    renewed: datetime.datetime = NOW,
    duration: int = 15,
    epoch: str = "4",
    in_sync: str = '["orders-a-1", "orders-a-0"]',
) -> dict:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "orders-a",
            "labels": {"skiff.io/cluster": "orders", "skiff.io/group": "orders-a"},
            "annotations": {
                "skiff.io/epoch": epoch,
                "skiff.io/endpoint": "10.0.0.7:8081",
                "skiff.io/ha-address": "10.0.0.7:10912",
                "skiff.io/in-sync": in_sync,
                "skiff.io/replicas": json.dumps({"orders-a-0": "10.0.0.6:8081"}),
            },
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }


def test_a_fresh_lease_names_the_master_its_term_and_in_sync_set() -> None:
    group = read_lease(lease(), NOW + datetime.timedelta(seconds=3))
    assert group.status_fields() == {
        "master": "orders-a-1",
        "epoch": 4,
        "inSync": ["orders-a-0", "orders-a-1"],
        "endpoint": "10.0.0.7:8081",
    }


def test_no_lease_or_no_holder_means_no_master() -> None:
    assert read_lease(None, NOW).master == ""
    released = read_lease(lease(holder=""), NOW)
    assert (released.master, released.epoch) == ("", 4)


def test_unreadable_annotations_read_as_unknown_not_as_an_error() -> None:
    group = read_lease(lease(epoch="four", in_sync="not json"), NOW)
    assert (group.master, group.epoch, group.in_sync) == ("orders-a-1", 0, ())
    assert read_lease(lease(in_sync='{"a": 1}'), NOW).in_sync == ()


@given(
    age=st.integers(min_value=0, max_value=120),
    duration=st.integers(min_value=1, max_value=60),
)
def test_a_holder_is_master_exactly_until_its_lease_runs_out(age: int, duration: int) -> None:
    renewed = NOW - datetime.timedelta(seconds=age)
    group = read_lease(lease(renewed=renewed, duration=duration), NOW)
    assert (group.master == "orders-a-1") == (age < duration)
    # An expired holder is no master, but the term it reached stays known.
    assert group.epoch == 4


# -- external endpoints ------------------------------------------------------


def node(name: str, **addresses: str) -> dict:
    return {
        "metadata": {"name": name},
        "status": {"addresses": [{"type": t, "address": a} for t, a in addresses.items()]},
    }


def node_port_service(port: int | None = 31000) -> dict:
    ports = [{"port": 8082, **({"nodePort": port} if port else {})}]
    return {"spec": {"type": "NodePort", "ports": ports}}


def test_a_node_port_is_reached_through_the_advertised_host_or_a_node() -> None:
    nodes = [
        node("worker-2", InternalIP="10.1.0.2", ExternalIP="203.0.113.2"),
        node("worker-1", InternalIP="10.1.0.1"),
    ]
    assert external_endpoint(node_port_service(), nodes, "mq.example.com") == (
        "mq.example.com:31000"
    )
    # An ExternalIP is preferred over any InternalIP.
    assert external_endpoint(node_port_service(), nodes) == "203.0.113.2:31000"
    assert external_endpoint(node_port_service(), nodes[1:]) == "10.1.0.1:31000"
    assert external_endpoint(node_port_service(), [node("v6", InternalIP="fd00::1")]) == (
        "[fd00::1]:31000"
    )


def test_unknown_external_addresses_stay_out_of_the_map() -> None:
    assert external_endpoint(None, [node("n", InternalIP="10.1.0.1")]) == ""
    assert external_endpoint(node_port_service(None), [node("n", InternalIP="10.1.0.1")]) == ""
    assert external_endpoint(node_port_service(), []) == ""
    pending = {"spec": {"type": "LoadBalancer", "ports": [{"port": 8082}]}, "status": {}}
    assert external_endpoint(pending, []) == ""


def test_a_load_balancer_is_reached_through_its_ingress() -> None:
    service = {
        "spec": {"type": "LoadBalancer", "ports": [{"port": 8082, "nodePort": 30007}]},
        "status": {"loadBalancer": {"ingress": [{"hostname": "lb-1.example.com"}]}},
    }
    assert external_endpoint(service, [node("n", ExternalIP="203.0.113.9")]) == (
        "lb-1.example.com:8082"
    )
    service["status"]["loadBalancer"]["ingress"] = [{"ip": "198.51.100.4"}]
    assert external_endpoint(service, []) == "198.51.100.4:8082"


def test_the_remoting_port_of_an_external_service_is_reached_by_its_own_port() -> None:
    service = {
        "spec": {
            "type": "NodePort",
            "ports": [
                {"name": "external", "port": 8082, "nodePort": 31000},
                {"name": "remoting", "port": 8080, "nodePort": 31544},
            ],
        }
    }
    nodes = [node("worker-1", InternalIP="10.1.0.1")]
    assert external_endpoint(service, nodes) == "10.1.0.1:31000"
    assert external_endpoint(service, nodes, port_name="remoting") == "10.1.0.1:31544"
    service["spec"] = {**service["spec"], "type": "LoadBalancer"}
    service["status"] = {"loadBalancer": {"ingress": [{"ip": "198.51.100.4"}]}}
    assert external_endpoint(service, [], port_name="remoting") == "198.51.100.4:8080"
    # A Service from before the remoting port has no remoting address.
    assert external_endpoint(node_port_service(), nodes, port_name="remoting") == ""


# -- restart order -------------------------------------------------------------


def pod(name: str, revision: str, ready: bool = True, deleting: bool = False) -> dict:
    metadata: dict = {"name": name, "labels": {REVISION_LABEL: revision}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-03-01T12:00:00Z"
    status = "True" if ready else "False"
    return {"metadata": metadata, "status": {"conditions": [{"type": "Ready", "status": status}]}}


def test_replicas_restart_before_the_master_whatever_its_ordinal() -> None:
    pods = [pod("g-0", "old"), pod("g-1", "old"), pod("g-2", "old")]
    # The master is ordinal 1: the replicas go first, highest ordinal first.
    assert next_restart(pods, "new", "g-1", {"g-0", "g-1", "g-2"}).pod == "g-2"
    pods[2] = pod("g-2", "new")
    assert next_restart(pods, "new", "g-1", {"g-0", "g-1", "g-2"}).pod == "g-0"
    pods[0] = pod("g-0", "new")
    step = next_restart(pods, "new", "g-1", {"g-0", "g-1"})
    assert (step.pod, step.outdated) == ("g-1", 1)
    pods[1] = pod("g-1", "new")
    assert next_restart(pods, "new", "g-0", {"g-0"}).pod == ""


def test_pods_that_never_held_a_lease_restart_from_the_highest_ordinal() -> None:
    # Pods of a release that made ordinal 0 master: it goes last.
    pods = [pod("g-0", "old"), pod("g-1", "old"), pod("g-2", "old")]
    order = []
    for _ in pods:
        step = next_restart(pods, "new", "", ())
        order.append(step.pod)
        pods = [pod(p["metadata"]["name"], "new") if p["metadata"]["name"] == step.pod else p
                for p in pods]  # fmt: skip
    assert order == ["g-2", "g-1", "g-0"]
    assert read_lease(None, NOW).exists is False
    assert read_lease(lease(holder=""), NOW).exists is True


def test_nothing_restarts_while_a_pod_is_not_ready_or_going() -> None:
    step = next_restart([pod("g-0", "old"), pod("g-1", "new", ready=False)], "new", "g-0", ())
    assert step.pod == "" and "g-1" in step.waiting
    step = next_restart([pod("g-0", "old"), pod("g-1", "old", deleting=True)], "new", "g-0", ())
    assert step.pod == "" and "g-1" in step.waiting


def test_the_master_waits_for_a_replica_in_its_in_sync_set() -> None:
    pods = [pod("g-0", "old"), pod("g-1", "new")]
    step = next_restart(pods, "new", "g-0", {"g-0"})
    assert step.pod == "" and "in-sync" in step.waiting
    assert next_restart(pods, "new", "g-0", {"g-0", "g-1"}).pod == "g-0"
    # A group of one pod has nobody to wait for.
    assert next_restart([pod("g-0", "old")], "new", "g-0", {"g-0"}).pod == "g-0"


@given(
    st.lists(st.booleans(), min_size=1, max_size=5),
    st.integers(min_value=0, max_value=4),
)
def test_the_master_never_restarts_before_an_outdated_replica(
    outdated: list[bool], master_ordinal: int
) -> None:
    pods = [pod(f"g-{i}", "old" if o else "new") for i, o in enumerate(outdated)]
    master = f"g-{master_ordinal % len(pods)}"
    step = next_restart(pods, "new", master, {p["metadata"]["name"] for p in pods})
    outdated_replicas = [
        p["metadata"]["name"]
        for p, o in zip(pods, outdated, strict=True)
        if o and p["metadata"]["name"] != master
    ]
    if outdated_replicas:
        assert step.pod in outdated_replicas
    elif any(outdated):
        assert step.pod == master
    else:
        assert step.pod == "" and step.waiting == ""


# -- draining ------------------------------------------------------------------


def test_a_draining_group_holds_its_topics_read_only() -> None:
    topic = Topic("orders", 8, 8, Permission.READ_WRITE, MessageType.NORMAL)
    assert on_group(topic, 2, {"c"}).perm == Permission.READ
    assert on_group(topic, 0, {"c"}) == topic
