"""The CRDs in a real API server: accepted, defaulted, and bad manifests refused readably."""

from __future__ import annotations

import pytest
from tests.support.kube_control_plane import ControlPlane


def broker(name: str, **spec: object) -> dict:
    return {
        "apiVersion": "skiff.io/v1alpha1",
        "kind": "Broker",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def topic(name: str, **spec: object) -> dict:
    return {
        "apiVersion": "skiff.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"brokerRef": {"name": "crd-defaults"}, **spec},
    }


def refused(plane: ControlPlane, manifest: dict) -> str:
    """The API server's message for a manifest it must refuse."""
    import yaml

    result = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest), check=False)
    assert result.returncode != 0, f"accepted: {manifest}"
    return result.stderr


def test_defaults_are_filled_in_by_the_api_server(crds: ControlPlane) -> None:
    crds.apply([broker("crd-defaults"), topic("crd-defaults-topic")])
    stored = crds.get("broker", "crd-defaults", "default")
    assert stored is not None
    spec = stored["spec"]
    assert spec["groups"] == 1
    assert spec["replicasPerGroup"] == 1
    assert spec["flushType"] == "ASYNC_FLUSH"
    assert spec["replicationMode"] == "ASYNC"
    assert spec["defaultReadQueues"] == 8
    assert spec["leaseDurationSeconds"] == 15
    # Authentication is on unless turned off.
    assert spec["auth"] == {"enabled": True}
    # TLS as the brokers default to it, with a certificate from the operator's own CA.
    assert spec["tls"] == {"mode": "permissive"}
    # External access and draining are off unless asked for.
    assert "externalAccess" not in spec and "drainGroups" not in spec
    assert spec["storage"] == {
        "size": "10Gi",
        "storageClassName": "",
        "deleteClaimsWithBroker": False,
    }
    stored_topic = crds.get("topic", "crd-defaults-topic", "default")
    assert stored_topic is not None
    assert stored_topic["spec"]["readQueues"] == 8
    assert stored_topic["spec"]["permission"] == "READ_WRITE"
    assert stored_topic["spec"]["deletionPolicy"] == "Delete"


def test_short_names_and_printer_columns(crds: ControlPlane) -> None:
    crds.apply([broker("crd-columns", groups=2)])
    table = crds.kubectl("get", "skb", "crd-columns", "-n", "default").stdout
    header, row = table.splitlines()[:2]
    assert header.split() == ["NAME", "GROUPS", "REPLICAS", "READY", "REASON", "ENDPOINT", "AGE"]
    assert row.split()[:3] == ["crd-columns", "2", "1"]
    topics = crds.kubectl("get", "skt", "-n", "default").stdout
    assert topics.splitlines()[0].split()[:5] == ["NAME", "BROKER", "READ", "WRITE", "TYPE"]
    # The category lists both kinds.
    assert "crd-columns" in crds.kubectl("get", "skiff", "-n", "default").stdout


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (broker("bad-groups", groups=0), "spec.groups: Invalid value: 0"),
        (broker("bad-flush", flushType="FAST"), 'supported values: "ASYNC_FLUSH", "SYNC_FLUSH"'),
        (
            broker("bad-pool", flushType="SYNC_FLUSH", transientStorePool=True),
            "transientStorePool works only with flushType ASYNC_FLUSH",
        ),
        (
            broker("bad-sync", replicationMode="SYNC"),
            "replicationMode SYNC needs replicasPerGroup of at least 2",
        ),
        (
            broker("bad-queues", defaultReadQueues=4, defaultWriteQueues=8),
            "defaultWriteQueues must not exceed defaultReadQueues",
        ),
        (
            broker("bad-settings", settings={"SKIFF_LISTEN": "0.0.0.0:1"}),
            "settings cannot set SKIFF_DATA_DIR, SKIFF_LISTEN",
        ),
        (
            broker("bad-secret-setting", settings={"SKIFF_HA_SECRET_FILE": "/tmp/x"}),
            "SKIFF_HA_SECRET, SKIFF_HA_SECRET_FILE",
        ),
        (
            broker("bad-tls-setting", settings={"SKIFF_TLS_CERT": "/tmp/x.crt"}),
            "SKIFF_TLS_* or SKIFF_METRICS_LISTEN; the operator sets them per pod (use lease",
        ),
        (
            broker(
                "bad-tls-sources",
                tls={"secretName": "mine", "issuerRef": {"name": "internal"}},
            ),
            "tls.secretName and tls.issuerRef are two sources of the certificate",
        ),
        (
            broker("bad-tls-issuer-kind", tls={"issuerRef": {"name": "x", "kind": "Vault"}}),
            'supported values: "Issuer", "ClusterIssuer"',
        ),
        (
            broker("bad-tls-mode", tls={"mode": "strict"}),
            'supported values: "permissive", "enforcing", "disabled"',
        ),
        (
            broker("bad-setting-name", settings={"max_message_size": "8m"}),
            "settings keys must be SKIFF_* variable names",
        ),
        (
            broker("a-broker-name-that-is-far-too-long-for-pods-x"),
            "a Broker name must be at most 40 characters",
        ),
        (
            broker("bad-role-setting", settings={"SKIFF_LEASE_DURATION": "5"}),
            "SKIFF_AUTH, SKIFF_AUTH_INIT_USER, SKIFF_TLS_* or SKIFF_METRICS_LISTEN; the operator",
        ),
        (
            broker("bad-metrics-setting", settings={"SKIFF_METRICS_LISTEN": "0.0.0.0:1"}),
            "or SKIFF_METRICS_LISTEN; the operator sets them per pod",
        ),
        (
            broker("bad-auth-setting", settings={"SKIFF_AUTH": "disabled"}),
            "(use leaseDurationSeconds, externalAccess, auth, tls and metrics)",
        ),
        (
            broker("bad-auth-user-setting", settings={"SKIFF_AUTH_INIT_USER": "a:bcdefgh"}),
            "SKIFF_AUTH, SKIFF_AUTH_INIT_USER",
        ),
        (broker("bad-auth", auth={"enabled": "maybe"}), "spec.auth.enabled: Invalid value"),
        (broker("bad-lease", leaseDurationSeconds=2), "spec.leaseDurationSeconds: Invalid value"),
        (
            broker("bad-external-type", externalAccess={"type": "Ingress"}),
            'supported values: "NodePort", "LoadBalancer"',
        ),
        (
            broker(
                "bad-external-fields",
                externalAccess={"type": "LoadBalancer", "advertisedHost": "mq.example"},
            ),
            "externalAccess.nodePortBase and advertisedHost apply only to type NodePort",
        ),
        (
            broker(
                "bad-node-ports",
                groups=3,
                externalAccess={"type": "NodePort", "nodePortBase": 32766},
            ),
            "externalAccess.nodePortBase + groups - 1 must not exceed 32767",
        ),
        (broker("bad-drain", drainGroups=["B"]), "spec.drainGroups[0]: Invalid value"),
        (
            topic("bad-topic-queues", readQueues=2, writeQueues=4),
            "writeQueues must not exceed readQueues",
        ),
        (topic("bad-topic-name", topicName="no spaces"), "spec.topicName: Invalid value"),
        (
            {**topic("bad-topic-ref"), "spec": {"readQueues": 1}},
            "spec.brokerRef: Required value",
        ),
    ],
    ids=lambda value: value["metadata"]["name"] if isinstance(value, dict) else "",
)
def test_bad_manifests_are_refused_with_a_readable_message(
    crds: ControlPlane, manifest: dict, message: str
) -> None:
    assert message in refused(crds, manifest)


def test_immutable_fields_are_refused_on_update(crds: ControlPlane) -> None:
    crds.apply([broker("crd-immutable", storage={"size": "1Gi"})])
    message = refused(crds, broker("crd-immutable", storage={"size": "2Gi"}))
    assert "storage.size cannot change after creation" in message
    crds.apply([topic("crd-immutable-topic", topicName="Orders")])
    message = refused(crds, topic("crd-immutable-topic", topicName="Other"))
    assert "topicName cannot change" in message
    # Changes a schema allows still go through.
    crds.apply([broker("crd-immutable", storage={"size": "1Gi"}, groups=2)])
    stored = crds.get("broker", "crd-immutable", "default")
    assert stored is not None and stored["spec"]["groups"] == 2
