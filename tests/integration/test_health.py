"""grpc.health.v1.Health on the client port of real broker processes: over plaintext
and TLS on the same port, and unsigned where authentication refuses unsigned
messaging."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tests.support.broker_process import running_broker

from skiff_broker.client.errors import MessagingError
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage

SERVING = health_pb2.HealthCheckResponse.SERVING
MESSAGING = "apache.rocketmq.v2.MessagingService"


def check(channel: grpc.Channel, service: str = "") -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def test_serving_over_plaintext_and_tls_on_one_permissive_port(tmp_path) -> None:
    with running_broker(tmp_path) as broker:
        with grpc.insecure_channel(broker.endpoint) as plaintext:
            assert check(plaintext) == SERVING
            assert check(plaintext, MESSAGING) == SERVING
        cert = (broker.data_dir / "tls" / "self-signed.crt").read_bytes()
        credentials = grpc.ssl_channel_credentials(root_certificates=cert)
        with grpc.secure_channel(broker.endpoint, credentials) as secure:
            assert check(secure) == SERVING


def test_serving_over_tls_where_plaintext_is_refused(tmp_path) -> None:
    with running_broker(tmp_path, "--tls-mode", "enforcing", "--ha-listen", "") as broker:
        cert = (broker.data_dir / "tls" / "self-signed.crt").read_bytes()
        credentials = grpc.ssl_channel_credentials(root_certificates=cert)
        with grpc.secure_channel(broker.endpoint, credentials) as secure:
            assert check(secure) == SERVING
        with grpc.insecure_channel(broker.endpoint) as plaintext, pytest.raises(grpc.RpcError):
            check(plaintext)


def test_an_unknown_service_is_not_found(tmp_path) -> None:
    with running_broker(tmp_path) as broker, grpc.insecure_channel(broker.endpoint) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            check(channel, "no.such.Service")
        assert refused.value.code() is grpc.StatusCode.NOT_FOUND


def test_unsigned_health_checks_pass_where_unsigned_messaging_is_refused(tmp_path) -> None:
    env = {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": "root:root-secret"}
    with running_broker(tmp_path, "--auto-create-topics", env=env) as broker:
        with grpc.insecure_channel(broker.endpoint) as channel:
            assert check(channel) == SERVING
        with MessagingClient(broker.endpoint) as unsigned, pytest.raises(MessagingError) as refused:
            unsigned.send([OutgoingMessage("health-topic", b"body")])
        assert refused.value.code == "UNAUTHORIZED"


def test_list_is_unimplemented_and_says_what_to_call_instead(tmp_path) -> None:
    with running_broker(tmp_path) as broker, grpc.insecure_channel(broker.endpoint) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            health_pb2_grpc.HealthStub(channel).List(health_pb2.HealthListRequest(), timeout=10)
        assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED
        assert "Check" in refused.value.details()
        # Still serving.
        assert check(channel) == SERVING
    assert [r for r in broker.log_lines() if r.get("level") == "error"] == []
