"""Rendering a Broker into its children: a pure function of the spec."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from skiff_broker.auth.model import parse_user_spec
from skiff_operator.admin_access import credentials_from_secret
from skiff_operator.broker_spec import BrokerSpec
from skiff_operator.naming import group_suffix
from skiff_operator.rendering import (
    SETTINGS_HASH_ANNOTATION,
    BrokerIdentity,
    RenderSettings,
    render_admin_secret,
    render_broker,
    render_ha_secret,
)

ROOT = Path(__file__).resolve().parents[3]
BROKER = BrokerIdentity(name="orders", namespace="shop", uid="0b6f6c1e-1111-2222-3333-444455556666")


def spec(**fields: object) -> BrokerSpec:
    return BrokerSpec.from_manifest(fields)


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_group_suffixes_follow_rocketmq_broker_names() -> None:
    assert [group_suffix(i) for i in (0, 1, 25, 26, 27, 701, 702)] == [
        "a",
        "b",
        "z",
        "aa",
        "ab",
        "zz",
        "aaa",
    ]


def test_one_group_renders_six_children_owned_by_the_broker() -> None:
    (group,) = render_broker(spec(), BROKER)
    kinds = [m["kind"] for m in group.all()]
    assert kinds == [
        "ConfigMap",
        "NetworkPolicy",
        "Service",
        "Service",
        "StatefulSet",
        "PodDisruptionBudget",
    ]
    for manifest in group.all():
        metadata = manifest["metadata"]
        assert metadata["namespace"] == "shop"
        assert metadata["labels"]["skiff.io/broker"] == "orders"
        (owner,) = metadata["ownerReferences"]
        assert owner == {
            "apiVersion": "skiff.io/v1alpha1",
            "kind": "Broker",
            "name": "orders",
            "uid": BROKER.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def test_groups_get_their_own_names_and_selectors() -> None:
    groups = render_broker(spec(groups=3), BROKER)
    assert [g.name for g in groups] == ["orders-a", "orders-b", "orders-c"]
    selectors = [g.stateful_set["spec"]["selector"]["matchLabels"] for g in groups]
    assert len({tuple(sorted(s.items())) for s in selectors}) == 3
    for group in groups:
        labels = group.stateful_set["spec"]["template"]["metadata"]["labels"]
        selector = group.stateful_set["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels.items()


def test_stateful_set_has_replicas_headless_service_and_data_claim() -> None:
    broker_spec = spec(
        replicasPerGroup=3,
        storage={"size": "50Gi", "storageClassName": "local-nvme", "deleteClaimsWithBroker": True},
    )
    (group,) = render_broker(broker_spec, BROKER)
    stateful_set = group.stateful_set["spec"]
    assert stateful_set["replicas"] == 3
    # Any ordinal may be master: the operator restarts pods itself, the master last.
    assert stateful_set["updateStrategy"] == {"type": "OnDelete"}
    assert stateful_set["podManagementPolicy"] == "OrderedReady"
    assert stateful_set["serviceName"] == group.headless_service["metadata"]["name"]
    assert group.headless_service["spec"]["clusterIP"] == "None"
    (claim,) = stateful_set["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["storageClassName"] == "local-nvme"
    assert stateful_set["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"
    mounts = stateful_set["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "data", "mountPath": "/var/lib/skiff"} in mounts


def test_claims_are_kept_unless_asked() -> None:
    (group,) = render_broker(spec(), BROKER)
    policy = group.stateful_set["spec"]["persistentVolumeClaimRetentionPolicy"]
    assert policy == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    (claim,) = group.stateful_set["spec"]["volumeClaimTemplates"]
    assert "storageClassName" not in claim["spec"]


def test_config_map_carries_the_broker_settings_as_skiff_variables() -> None:
    broker_spec = spec(
        flushType="SYNC_FLUSH",
        replicasPerGroup=2,
        replicationMode="SYNC",
        defaultReadQueues=16,
        defaultWriteQueues=12,
        settings={"SKIFF_MAX_MESSAGE_SIZE": "8m"},
    )
    group = render_broker(broker_spec, BROKER)[0]
    data = group.config_map["data"]
    assert data["SKIFF_FLUSH_TYPE"] == "SYNC_FLUSH"
    assert data["SKIFF_TRANSIENT_STORE_POOL"] == "false"
    assert data["SKIFF_BROKER_NAME"] == "orders-a"
    assert data["SKIFF_DATA_DIR"] == "/var/lib/skiff"
    assert data["SKIFF_LISTEN"] == "0.0.0.0:8081"
    # The group's Lease decides the master: no pod is told whom to follow.
    assert data["SKIFF_ROLE"] == "LEASE"
    assert "SKIFF_MASTER_ADDRESS" not in data
    assert data["SKIFF_CLUSTER"] == "orders"
    assert data["SKIFF_LEASE_DURATION"] == "15"
    assert data["SKIFF_HA_LISTEN"] == "0.0.0.0:10912"
    # Nobody named to scrape: /metrics (every topic and group) stays on the pod's loopback.
    assert data["SKIFF_METRICS_LISTEN"] == "127.0.0.1:5557"
    assert "SKIFF_EXTERNAL_LISTEN" not in data
    assert data["SKIFF_REPLICATION_MODE"] == "SYNC"
    assert data["SKIFF_DEFAULT_READ_QUEUES"] == "16"
    assert data["SKIFF_DEFAULT_WRITE_QUEUES"] == "12"
    assert data["SKIFF_MAX_MESSAGE_SIZE"] == "8m"
    assert not any(key.startswith("OTEL_") for key in data)
    container = group.stateful_set["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [
        {"configMapRef": {"name": group.config_map["metadata"]["name"]}}
    ]


def test_pods_get_rocketmqs_production_file_sizes_unless_the_broker_sets_others() -> None:
    data = render_broker(spec(), BROKER)[0].config_map["data"]
    # 1 GiB segments, 300,000-unit consume-queue files, 5M slots and 20M index entries.
    assert data["SKIFF_COMMIT_LOG_FILE_SIZE"] == str(1024**3)
    assert data["SKIFF_CONSUME_QUEUE_FILE_ENTRIES"] == "300000"
    assert data["SKIFF_INDEX_FILE_ENTRIES"] == "20000000"
    assert data["SKIFF_INDEX_HASH_SLOTS"] == "5000000"
    chosen = spec(settings={"SKIFF_COMMIT_LOG_FILE_SIZE": "256m"})
    data = render_broker(chosen, BROKER)[0].config_map["data"]
    assert data["SKIFF_COMMIT_LOG_FILE_SIZE"] == "256m"


def test_rendered_file_sizes_are_read_by_skiff_broker() -> None:
    """Each size setting the operator renders is an option `skiff broker` reads from it."""
    from skiff_broker.cli import broker

    data = render_broker(spec(), BROKER)[0].config_map["data"]
    read = {param.envvar for param in broker.params}
    sizes = {
        "SKIFF_COMMIT_LOG_FILE_SIZE",
        "SKIFF_CONSUME_QUEUE_FILE_ENTRIES",
        "SKIFF_INDEX_FILE_ENTRIES",
        "SKIFF_INDEX_HASH_SLOTS",
    }
    assert sizes <= data.keys()
    assert sizes <= read


def test_telemetry_settings_only_with_an_endpoint() -> None:
    broker_spec = spec(telemetry={"otlpEndpoint": "http://collector:4318", "samplingRatio": 0.25})
    data = render_broker(broker_spec, BROKER)[0].config_map["data"]
    assert data["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector:4318"
    assert data["OTEL_TRACES_SAMPLER_ARG"] == "0.25"


def test_cluster_domain_and_default_image_come_from_the_operator() -> None:
    render = RenderSettings(default_image="registry.local/skiff:9", cluster_domain="corp.internal")
    group = render_broker(spec(), BROKER, render)[0]
    container = group.stateful_set["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.local/skiff:9"
    own_image = render_broker(spec(image="mine:1"), BROKER, render)[0]
    assert own_image.stateful_set["spec"]["template"]["spec"]["containers"][0]["image"] == "mine:1"


def test_pod_runs_the_broker_with_per_pod_values_from_the_downward_api() -> None:
    group = render_broker(spec(), BROKER)[0]
    pod = group.stateful_set["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["skiff"]
    assert container["args"] == ["broker"]
    env = env_of(container)
    assert env["SKIFF_ADVERTISE"] == "$(POD_IP):8081"
    assert env["SKIFF_HA_ADVERTISE"] == "$(POD_IP):10912"
    # Remoting routes name each pod at its own address, as gRPC routes do.
    assert env["SKIFF_REMOTING_ADVERTISE"] == "$(POD_IP):8080"
    assert group.config_map["data"]["SKIFF_REMOTING_LISTEN"] == "0.0.0.0:8080"
    assert {"name": "remoting", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    assert env["SKIFF_POD_NAME"] == "$(POD_NAME)"
    fields = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in container["env"]
        if "fieldRef" in e.get("valueFrom", {})
    }
    assert fields == {
        "POD_NAME": "metadata.name",
        "POD_IP": "status.podIP",
        "SKIFF_NAMESPACE": "metadata.namespace",
    }
    # $(VAR) only refers to variables defined earlier in the list.
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_IP") < names.index("SKIFF_ADVERTISE")
    assert names.index("POD_IP") < names.index("SKIFF_HA_ADVERTISE")
    assert names.index("POD_IP") < names.index("SKIFF_REMOTING_ADVERTISE")
    # The broker holds its Lease with the Broker's own account; only its pods get a token.
    assert pod["serviceAccountName"] == "orders-broker"
    assert pod["automountServiceAccountToken"] is True
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsNonRoot"] is True
    assert pod["securityContext"]["fsGroup"] == security["runAsUser"]


def test_every_pod_reads_the_brokers_replication_secret_from_its_secret() -> None:
    for group in render_broker(spec(groups=2), BROKER):
        (container,) = group.stateful_set["spec"]["template"]["spec"]["containers"]
        (entry,) = [e for e in container["env"] if e["name"] == "SKIFF_HA_SECRET"]
        assert entry == {
            "name": "SKIFF_HA_SECRET",
            "valueFrom": {"secretKeyRef": {"name": "orders-replication", "key": "secret"}},
        }
        # Pods of a group replicate, so they serve on explicit addresses.
        assert group.config_map["data"]["SKIFF_LISTEN"] == "0.0.0.0:8081"
        assert group.config_map["data"]["SKIFF_HA_LISTEN"] == "0.0.0.0:10912"
        assert "SKIFF_HA_SECRET" not in group.config_map["data"]


def test_the_replication_secret_is_random_owned_by_the_broker_and_long_enough() -> None:
    first, second = render_ha_secret(BROKER), render_ha_secret(BROKER)
    assert first["kind"] == "Secret"
    assert first["metadata"]["name"] == "orders-replication"
    assert first["metadata"]["namespace"] == "shop"
    (owner,) = first["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Broker", BROKER.uid, True)
    value = first["stringData"]["secret"]
    assert len(value) == 44  # base64 of 32 random bytes
    assert value != second["stringData"]["secret"]


def test_auth_is_on_by_default_with_the_super_user_from_the_admin_secret() -> None:
    assert BrokerSpec.from_manifest({}).auth.enabled
    for group in render_broker(spec(groups=2), BROKER):
        assert group.config_map["data"]["SKIFF_AUTH"] == "enabled"
        # The super user is in no ConfigMap: the pods read it from the Secret.
        assert "SKIFF_AUTH_INIT_USER" not in group.config_map["data"]
        (container,) = group.stateful_set["spec"]["template"]["spec"]["containers"]
        (entry,) = [e for e in container["env"] if e["name"] == "SKIFF_AUTH_INIT_USER"]
        assert entry == {
            "name": "SKIFF_AUTH_INIT_USER",
            "valueFrom": {"secretKeyRef": {"name": "orders-admin", "key": "user"}},
        }


def test_a_broker_with_auth_off_renders_no_auth_settings() -> None:
    off = spec(auth={"enabled": False})
    assert not BrokerSpec.from_manifest({"auth": {"enabled": False}}).auth.enabled
    for group in render_broker(off, BROKER):
        assert not any(key.startswith("SKIFF_AUTH") for key in group.config_map["data"])
        (container,) = group.stateful_set["spec"]["template"]["spec"]["containers"]
        assert not any(e["name"].startswith("SKIFF_AUTH") for e in container["env"])
    # Turning auth on or off restarts the pods.
    assert _template_hash(off) != _template_hash(spec())


def _template_hash(broker_spec: BrokerSpec) -> str:
    template = render_broker(broker_spec, BROKER)[0].stateful_set["spec"]["template"]
    return template["metadata"]["annotations"][SETTINGS_HASH_ANNOTATION]


def test_the_admin_secret_is_a_random_super_user_the_broker_and_operator_agree_on() -> None:
    first, second = render_admin_secret(BROKER), render_admin_secret(BROKER)
    assert first["metadata"]["name"] == "orders-admin"
    assert first["metadata"]["namespace"] == "shop"
    (owner,) = first["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Broker", BROKER.uid, True)
    data = first["stringData"]
    assert data["accessKey"].startswith("orders-admin-")
    assert len(data["secretKey"]) >= 32
    assert data != second["stringData"]
    # What the broker makes of SKIFF_AUTH_INIT_USER (it refuses a malformed pair) is the
    # pair the operator signs with.
    user = parse_user_spec(data["user"])
    stored = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    credentials = credentials_from_secret({"data": stored})
    assert (user.access_key, user.secret_key) == (credentials.access_key, credentials.secret_key)
    assert user.is_super


def test_client_service_selects_the_pod_the_lease_made_master() -> None:
    group = render_broker(spec(replicasPerGroup=3), BROKER)[0]
    selector = group.client_service["spec"]["selector"]
    assert selector == {
        "skiff.io/broker": "orders",
        "skiff.io/group": "a",
        "skiff.io/role": "master",
    }
    assert group.client_service["spec"]["ports"] == [
        {"name": "grpc", "port": 8081, "targetPort": "grpc"},
        {"name": "remoting", "port": 8080, "targetPort": "remoting"},
    ]
    assert {"name": "remoting", "port": 8080, "targetPort": "remoting"} in group.headless_service[
        "spec"
    ]["ports"]
    assert group.disruption_budget["spec"]["maxUnavailable"] == 1
    # The headless Service keeps a name for every pod, master or not.
    assert group.headless_service["spec"]["selector"] == {
        "skiff.io/broker": "orders",
        "skiff.io/group": "a",
    }


def test_network_policy_opens_the_client_port_to_all_and_replication_to_the_group() -> None:
    groups = render_broker(spec(groups=2), BROKER)
    for group, suffix in zip(groups, "ab", strict=True):
        policy = group.network_policy
        assert policy is not None
        assert policy["metadata"]["name"] == f"orders-{suffix}"
        fenced = {"skiff.io/broker": "orders", "skiff.io/group": suffix}
        assert policy["spec"]["podSelector"] == {"matchLabels": fenced}
        # The StatefulSet's pods are the ones fenced.
        pod_labels = group.stateful_set["spec"]["template"]["metadata"]["labels"]
        assert fenced.items() <= pod_labels.items()
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        # No rule names the metrics port: nobody was named to scrape it.
        clients, replication = policy["spec"]["ingress"]
        assert clients == {
            "ports": [{"protocol": "TCP", "port": 8081}, {"protocol": "TCP", "port": 8080}]
        }
        assert replication == {
            "from": [{"podSelector": {"matchLabels": fenced}}],
            "ports": [{"protocol": "TCP", "port": 10912}],
        }


def test_network_policy_opens_the_external_port_with_external_access() -> None:
    (group,) = render_broker(spec(externalAccess={"type": "LoadBalancer"}), BROKER)
    assert group.network_policy is not None
    clients = group.network_policy["spec"]["ingress"][0]
    assert clients == {
        "ports": [{"protocol": "TCP", "port": port} for port in (8081, 8080, 8082, 8083)]
    }


PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}


def test_metrics_are_admitted_only_from_the_peers_the_spec_names() -> None:
    (group,) = render_broker(spec(metrics={"allowFrom": [PROMETHEUS]}), BROKER)
    assert group.network_policy is not None
    rules = group.network_policy["spec"]["ingress"]
    metrics = [r for r in rules if {"protocol": "TCP", "port": 5557} in r["ports"]]
    # One rule, from exactly the named peers, for the metrics port alone.
    assert metrics == [{"from": [PROMETHEUS], "ports": [{"protocol": "TCP", "port": 5557}]}]
    # Scrapers reach the pod's address now, through that rule only.
    assert group.config_map["data"]["SKIFF_METRICS_LISTEN"] == "0.0.0.0:5557"


def test_without_named_scrapers_no_rule_admits_the_metrics_port() -> None:
    for broker_spec in (spec(), spec(metrics={"podMonitor": True}), spec(metrics={})):
        (group,) = render_broker(broker_spec, BROKER)
        assert group.network_policy is not None
        ported = [p["port"] for r in group.network_policy["spec"]["ingress"] for p in r["ports"]]
        assert 5557 not in ported and "metrics" not in ported
        assert group.config_map["data"]["SKIFF_METRICS_LISTEN"] == "127.0.0.1:5557"


def test_the_operators_default_scrapers_serve_brokers_that_name_none() -> None:
    default = {"namespaceSelector": {"matchLabels": {"team": "observability"}}}
    render = RenderSettings(metrics_allow_from=(default,))
    (group,) = render_broker(spec(), BROKER, render)
    assert group.network_policy is not None
    assert group.network_policy["spec"]["ingress"][-1] == {
        "from": [default],
        "ports": [{"protocol": "TCP", "port": 5557}],
    }
    assert group.config_map["data"]["SKIFF_METRICS_LISTEN"] == "0.0.0.0:5557"
    # A Broker's own list wins over the default.
    (own,) = render_broker(spec(metrics={"allowFrom": [PROMETHEUS]}), BROKER, render)
    assert own.network_policy is not None
    assert own.network_policy["spec"]["ingress"][-1]["from"] == [PROMETHEUS]


def test_network_policy_can_be_turned_off() -> None:
    (group,) = render_broker(spec(networkPolicy={"enabled": False}), BROKER)
    assert group.network_policy is None
    assert "NetworkPolicy" not in [m["kind"] for m in group.all()]


def test_scheduling_spreads_pods_of_a_group_and_keeps_user_rules() -> None:
    toleration = {"key": "dedicated", "operator": "Equal", "value": "mq", "effect": "NoSchedule"}
    broker_spec = spec(
        scheduling={
            "spreadAcrossZones": True,
            "tolerations": [toleration],
            "nodeSelector": {"disk": "nvme"},
        }
    )
    pod = render_broker(broker_spec, BROKER)[0].stateful_set["spec"]["template"]["spec"]
    keys = [c["topologyKey"] for c in pod["topologySpreadConstraints"]]
    assert keys == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    assert pod["tolerations"] == [toleration]
    assert pod["nodeSelector"] == {"disk": "nvme"}
    unspread = spec(scheduling={"spreadAcrossNodes": False})
    pod = render_broker(unspread, BROKER)[0].stateful_set["spec"]["template"]["spec"]
    assert "topologySpreadConstraints" not in pod


def test_settings_hash_moves_with_settings_only() -> None:
    def hash_of(broker_spec: BrokerSpec) -> str:
        template = render_broker(broker_spec, BROKER)[0].stateful_set["spec"]["template"]
        return template["metadata"]["annotations"][SETTINGS_HASH_ANNOTATION]

    base = hash_of(spec())
    assert hash_of(spec()) == base
    assert hash_of(spec(flushType="SYNC_FLUSH")) != base
    assert hash_of(spec(settings={"SKIFF_MAX_MESSAGE_SIZE": "8m"})) != base
    assert hash_of(spec(resources={"limits": {"memory": "2Gi"}})) != base
    # Scaling changes the replica count, not the pods: no restart.
    assert hash_of(spec(replicasPerGroup=3)) == base


def test_rendering_is_a_pure_function_of_its_input() -> None:
    broker_spec = spec(groups=2, replicasPerGroup=2)
    first = [g.all() for g in render_broker(broker_spec, BROKER)]
    second = [g.all() for g in render_broker(broker_spec, BROKER)]
    assert first == second
    # Mutating one result does not leak into the next.
    first[0][0]["data"]["SKIFF_FLUSH_TYPE"] = "changed"
    assert render_broker(broker_spec, BROKER)[0].config_map["data"]["SKIFF_FLUSH_TYPE"] == (
        "ASYNC_FLUSH"
    )


def _crd_spec_defaults(properties: dict) -> dict:
    defaults = {}
    for key, schema in properties.items():
        if "properties" in schema:
            nested = _crd_spec_defaults(schema["properties"])
            if nested:
                defaults[key] = nested
        elif "default" in schema:
            defaults[key] = schema["default"]
    return defaults


def test_spec_defaults_match_the_crd_defaults() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "skiff.io_brokers.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    from_crd = BrokerSpec.from_manifest(_crd_spec_defaults(schema["properties"]))
    assert from_crd == BrokerSpec.from_manifest({})
