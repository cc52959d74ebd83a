"""How brokers reach each other: when peer calls use TLS, and what stops a start."""

from __future__ import annotations

import ssl

import pytest
from tests.support.certificate_authority import CertificateAuthority

from skiff_broker.client.channels import PLAINTEXT
from skiff_broker.tls.peers import (
    PEER_NAME,
    check_carries_peer_name,
    check_peers_can_connect,
    peer_client_tls,
    replication_client_context,
    replication_server_context,
)
from skiff_broker.tls.settings import TlsConfig, TlsMode


def test_peer_calls_stay_plaintext_without_a_ca_outside_enforcing():
    for mode in (TlsMode.DISABLED, TlsMode.PERMISSIVE):
        assert peer_client_tls(TlsConfig(mode=mode)) is PLAINTEXT


def test_peer_calls_use_tls_checked_for_the_peer_name_in_enforcing_or_with_a_ca():
    enforcing = peer_client_tls(TlsConfig(mode=TlsMode.ENFORCING, ca_file="/ca.pem"))
    assert (enforcing.enabled, enforcing.verify) == (True, True)
    assert (enforcing.ca_file, enforcing.server_name) == ("/ca.pem", PEER_NAME)
    assert peer_client_tls(TlsConfig(ca_file="/ca.pem")).enabled


def test_enforcing_without_a_ca_is_refused_only_when_there_are_peers():
    alone = TlsConfig(mode=TlsMode.ENFORCING)
    check_peers_can_connect(alone, has_peers=False)
    with pytest.raises(ValueError, match="peers need --tls-ca"):
        check_peers_can_connect(alone, has_peers=True)
    check_peers_can_connect(TlsConfig(mode=TlsMode.PERMISSIVE), has_peers=True)


def test_a_certificate_without_the_peer_name_is_refused_when_a_ca_is_given(tmp_path):
    ca = CertificateAuthority(tmp_path)
    good_cert, good_key = ca.issue("good")
    check_carries_peer_name(TlsConfig(cert_file=str(good_cert), key_file=str(good_key)))
    check_carries_peer_name(
        TlsConfig(cert_file=str(good_cert), key_file=str(good_key), ca_file=str(ca.ca_file))
    )
    cert, key = ca.issue("nameless", names=("broker-0.example",))
    with pytest.raises(ValueError, match=f"does not carry the DNS name {PEER_NAME}"):
        check_carries_peer_name(
            TlsConfig(cert_file=str(cert), key_file=str(key), ca_file=str(ca.ca_file))
        )


def test_replication_is_mutual_tls_only_with_a_ca_and_a_certificate(tmp_path):
    ca = CertificateAuthority(tmp_path)
    cert, key = ca.issue("broker")
    assert replication_server_context(TlsConfig(ca_file=str(ca.ca_file))) is None
    assert replication_client_context(TlsConfig(cert_file=str(cert), key_file=str(key))) is None
    both = TlsConfig(cert_file=str(cert), key_file=str(key), ca_file=str(ca.ca_file))
    server = replication_server_context(both)
    client = replication_client_context(both)
    assert server is not None and server.verify_mode is ssl.CERT_REQUIRED
    assert client is not None and client.verify_mode is ssl.CERT_REQUIRED and client.check_hostname
