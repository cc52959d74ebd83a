"""The operator reaches a Broker whose ports refuse plaintext: TLS checked against its CA.

A real broker in ``--tls-mode enforcing`` with a certificate from a test CA that carries
the peer name; the operator's ``AdminCredentials`` reads the Broker's Secrets through a
stand-in for the API server (an in-memory map of the Secrets it would return: reading
them from a real API server is shown in tests/k8s/test_operator.py).
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from tests.support.broker_process import running_broker
from tests.support.certificate_authority import CertificateAuthority

from skiff_broker.client.errors import BrokerUnavailable
from skiff_operator.admin_access import AdminCredentials

NAMESPACE = "shop"
BROKER = "orders"


class StoredSecrets:
    """What the operator's KubeClient.get answers for Secrets (stand-in, see above)."""

    def __init__(self, secrets: dict[str, dict[str, bytes]]) -> None:
        self._secrets = secrets

    async def get(self, kind: str, namespace: str, name: str) -> dict | None:
        assert (kind, namespace) == ("Secret", NAMESPACE)
        data = self._secrets.get(name)
        if data is None:
            return None
        return {"data": {key: base64.b64encode(value).decode() for key, value in data.items()}}


def broker_object(**tls: object) -> dict:
    return {
        "metadata": {"name": BROKER, "namespace": NAMESPACE, "uid": "u-1"},
        "spec": {"auth": {"enabled": False}, "tls": {"mode": "enforcing", **tls}},
    }


def broker_name_via(secrets: dict[str, dict[str, bytes]], endpoint: str, **tls: object) -> str:
    credentials = AdminCredentials(StoredSecrets(secrets), timeout=10)  # type: ignore[arg-type]
    access = asyncio.run(credentials.access(broker_object(**tls)))
    with access.client(endpoint) as admin:
        return admin.broker_info().broker_name


def test_the_operator_calls_an_enforcing_broker_over_tls_checked_against_its_ca(
    tmp_path: Path,
) -> None:
    ca = CertificateAuthority(tmp_path / "ca")
    foreign = CertificateAuthority(tmp_path / "foreign", name="foreign-ca")
    with running_broker(
        tmp_path, "--tls-mode", "enforcing", "--ha-listen", "", *ca.broker_args("orders-a-0")
    ) as broker:
        # The managed layout: <broker>-tls holds the leaf and the CA that signed it.
        ours = {f"{BROKER}-tls": {"ca.crt": ca.ca_file.read_bytes()}}
        assert broker_name_via(ours, broker.endpoint) == "broker-a"
        # A user's Secret named in spec.tls.secretName is read instead.
        named = {"my-cert": {"ca.crt": ca.ca_file.read_bytes()}}
        assert broker_name_via(named, broker.endpoint, secretName="my-cert") == "broker-a"
        # A CA that did not sign the broker's certificate is not trusted.
        theirs = {f"{BROKER}-tls": {"ca.crt": foreign.ca_file.read_bytes()}}
        with pytest.raises(BrokerUnavailable):
            broker_name_via(theirs, broker.endpoint)
