"""The brokers' probes (the gRPC health service), their metrics port and the PodMonitor."""

from __future__ import annotations

from skiff_operator.broker_spec import BrokerSpec
from skiff_operator.rendering import BrokerIdentity, render_broker, render_pod_monitor

BROKER = BrokerIdentity(name="orders", namespace="shop", uid="0b6f6c1e-1111-2222-3333-444455556666")


def container(spec: dict) -> dict:
    (group,) = render_broker(BrokerSpec.from_manifest(spec), BROKER)
    (found,) = group.stateful_set["spec"]["template"]["spec"]["containers"]
    return found


def test_every_probe_asks_the_grpc_health_service_on_the_client_port() -> None:
    broker = container({})
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert broker[probe]["grpc"] == {"port": 8081}
        assert "tcpSocket" not in broker[probe]
        # The startup probe covers recovery; nothing waits a fixed delay.
        assert "initialDelaySeconds" not in broker[probe]
    startup = broker["startupProbe"]
    # Half an hour of recovery before the kubelet gives up on a start.
    assert startup["periodSeconds"] * startup["failureThreshold"] == 1800


def test_enforcing_tls_keeps_tcp_probes_the_kubelet_can_make() -> None:
    broker = container({"tls": {"mode": "enforcing"}})
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert broker[probe]["tcpSocket"] == {"port": "grpc"}
        assert "grpc" not in broker[probe]


def test_the_metrics_port_is_named_for_scrapers() -> None:
    ports = {p["name"]: p["containerPort"] for p in container({})["ports"]}
    assert ports["metrics"] == 5557


def test_pod_monitor_selects_every_pod_of_the_broker_by_its_metrics_port() -> None:
    monitor = render_pod_monitor(BROKER)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["kind"] == "PodMonitor"
    assert monitor["metadata"]["name"] == "orders"
    assert monitor["metadata"]["namespace"] == "shop"
    assert monitor["metadata"]["ownerReferences"][0]["uid"] == BROKER.uid
    assert monitor["spec"]["selector"] == {"matchLabels": {"skiff.io/broker": "orders"}}
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics"}]
    (group,) = render_broker(BrokerSpec(), BROKER)
    pod_labels = group.stateful_set["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_pod_monitor_is_off_unless_asked() -> None:
    assert not BrokerSpec.from_manifest({}).metrics.pod_monitor
    assert BrokerSpec.from_manifest({"metrics": {"podMonitor": True}}).metrics.pod_monitor
