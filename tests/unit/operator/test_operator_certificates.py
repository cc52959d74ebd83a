"""The brokers' TLS certificate: its contents, the operator's CA, re-issuing, the pods' mount."""

from __future__ import annotations

import base64
import dataclasses
import datetime

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from skiff_operator.broker_spec import BrokerSpec, CertificateSource
from skiff_operator.certificates import (
    CertificateContents,
    KeyPair,
    ca_problem,
    certificate_contents,
    issue_leaf,
    new_ca,
    reissue_reason,
)
from skiff_operator.rendering import (
    BrokerIdentity,
    render_broker,
    render_ca_secret,
    render_certificate,
    render_tls_secret,
    settings_hash,
)

BROKER = BrokerIdentity(name="orders", namespace="shop", uid="0b6f6c1e-1111-2222-3333-444455556666")
NOW = datetime.datetime(2026, 6, 1, 12, 0, tzinfo=datetime.UTC)


def spec(**fields: object) -> BrokerSpec:
    return BrokerSpec.from_manifest(fields)


def contents(**fields: object) -> CertificateContents:
    return certificate_contents(spec(**fields), "orders", "shop", "cluster.local")


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return new_ca("orders", "shop", NOW)


def test_the_certificate_names_every_host_clients_and_peers_dial() -> None:
    names = set(contents(groups=2).dns_names)
    for service in ("orders", "orders-a", "orders-b"):
        assert {
            service,
            f"{service}.shop",
            f"{service}.shop.svc",
            f"{service}.shop.svc.cluster.local",
        } <= names
    # Each pod by its stable name under its group's headless Service.
    assert "*.orders-a-pods.shop.svc.cluster.local" in names
    # The name peers and the operator check, whatever address they dialled.
    assert "skiff-broker" in names
    assert "*.orders-b-pods.shop.svc.cluster.local" in names
    assert not any("orders-c" in n for n in names)


def test_the_external_host_is_named_as_a_dns_name_or_an_ip() -> None:
    by_name = contents(externalAccess={"type": "NodePort", "advertisedHost": "MQ.example.com"})
    assert "mq.example.com" in by_name.dns_names
    by_ip = contents(externalAccess={"type": "NodePort", "advertisedHost": "203.0.113.7"})
    assert by_ip.ip_addresses == ("203.0.113.7",)
    assert "203.0.113.7" not in by_ip.dns_names


def test_contents_are_a_pure_function_of_the_spec() -> None:
    assert contents(groups=3) == contents(groups=3)
    assert contents(groups=3) != contents(groups=2)


def test_the_leaf_verifies_against_the_ca_for_every_name_and_both_usages(ca: KeyPair) -> None:
    wanted = contents(groups=2)
    leaf = issue_leaf(ca, "orders", wanted, NOW)
    cert = x509.load_pem_x509_certificate(leaf.cert_pem)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    cert.verify_directly_issued_by(ca_cert)
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert cert.not_valid_after_utc - NOW == datetime.timedelta(days=90)
    # A TLS client trusting only the Broker's CA accepts it for a pod's and a Service's name.
    verifier = (
        PolicyBuilder()
        .store(Store([ca_cert]))
        .time(NOW)
        .build_server_verifier(x509.DNSName("orders-b-1.orders-b-pods.shop.svc.cluster.local"))
    )
    verifier.verify(cert, [])
    other = (
        PolicyBuilder()
        .store(Store([ca_cert]))
        .time(NOW)
        .build_server_verifier(x509.DNSName("payments.shop.svc"))
    )
    with pytest.raises(VerificationError):
        other.verify(cert, [])


def test_a_leaf_from_another_ca_does_not_verify(ca: KeyPair) -> None:
    stranger = new_ca("orders", "shop", NOW)
    leaf = issue_leaf(stranger, "orders", contents(), NOW)
    assert "not issued by the Broker's CA" in reissue_reason(leaf, ca.cert_pem, contents(), NOW)


def test_the_ca_is_a_long_lived_ecdsa_ca(ca: KeyPair) -> None:
    cert = x509.load_pem_x509_certificate(ca.cert_pem)
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca is True
    assert cert.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
    assert cert.not_valid_after_utc - NOW >= datetime.timedelta(days=3000)
    assert ca_problem(ca) == ""
    assert "does not belong" in ca_problem(
        dataclasses.replace(ca, key_pem=new_ca("x", "y", NOW).key_pem)
    )
    assert "cannot be read" in ca_problem(KeyPair(b"", b""))


def test_a_fresh_leaf_is_kept(ca: KeyPair) -> None:
    leaf = issue_leaf(ca, "orders", contents(), NOW)
    assert reissue_reason(leaf, ca.cert_pem, contents(), NOW) == ""
    # Two thirds of its life later it still has a third left.
    assert reissue_reason(leaf, ca.cert_pem, contents(), NOW + datetime.timedelta(days=59)) == ""


def test_a_leaf_is_reissued_with_less_than_a_third_of_its_life_left(ca: KeyPair) -> None:
    leaf = issue_leaf(ca, "orders", contents(), NOW)
    later = NOW + datetime.timedelta(days=61)
    assert "a third" in reissue_reason(leaf, ca.cert_pem, contents(), later)
    expired = NOW + datetime.timedelta(days=91)
    assert reissue_reason(leaf, ca.cert_pem, contents(), expired) != ""


def test_a_leaf_is_reissued_when_the_names_change(ca: KeyPair) -> None:
    leaf = issue_leaf(ca, "orders", contents(groups=1), NOW)
    assert "names" in reissue_reason(leaf, ca.cert_pem, contents(groups=2), NOW)


def test_a_leaf_is_reissued_when_its_key_is_not_its_own(ca: KeyPair) -> None:
    leaf = issue_leaf(ca, "orders", contents(), NOW)
    other = issue_leaf(ca, "orders", contents(), NOW)
    mixed = KeyPair(leaf.cert_pem, other.key_pem)
    assert "key" in reissue_reason(mixed, ca.cert_pem, contents(), NOW)
    assert "cannot be read" in reissue_reason(KeyPair(b"junk", b""), ca.cert_pem, contents(), NOW)


def test_the_reissue_rule_is_pure(ca: KeyPair) -> None:
    leaf = issue_leaf(ca, "orders", contents(), NOW)
    later = NOW + datetime.timedelta(days=70)
    answers = {reissue_reason(leaf, ca.cert_pem, contents(), later) for _ in range(3)}
    assert len(answers) == 1 and answers != {""}
    # The clock is an argument: the same leaf is fine "now".
    assert reissue_reason(leaf, ca.cert_pem, contents(), NOW) == ""


def _pod(broker_spec: BrokerSpec, user_secret_has_ca: bool = False) -> dict:
    (group,) = render_broker(broker_spec, BROKER, user_secret_has_ca=user_secret_has_ca)
    return group.stateful_set["spec"]["template"]["spec"]


def _tls_env(pod: dict) -> dict[str, str]:
    (container,) = pod["containers"]
    return {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("SKIFF_TLS")}


def test_by_default_pods_mount_the_operators_secret_read_only_with_its_ca() -> None:
    assert spec().tls.source == CertificateSource.MANAGED
    pod = _pod(spec())
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "orders-tls"
    # Readable by the broker's group (the pod's fsGroup) only, never writable.
    mode = volume["secret"]["defaultMode"]
    assert mode & 0o040 and not mode & 0o222 and not mode & 0o007
    assert pod["securityContext"]["fsGroup"] == pod["containers"][0]["securityContext"]["runAsUser"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tls"]
    assert mount == {"name": "tls", "mountPath": "/etc/skiff/tls", "readOnly": True}
    assert _tls_env(pod) == {
        "SKIFF_TLS_CERT": "/etc/skiff/tls/tls.crt",
        "SKIFF_TLS_KEY": "/etc/skiff/tls/tls.key",
        "SKIFF_TLS_CA": "/etc/skiff/tls/ca.crt",
    }
    (group,) = render_broker(spec(), BROKER)
    assert group.config_map["data"]["SKIFF_TLS_MODE"] == "permissive"


def test_a_users_secret_is_mounted_with_its_ca_only_if_it_has_one() -> None:
    user = spec(tls={"mode": "enforcing", "secretName": "orders-cert"})
    assert user.tls.source == CertificateSource.SECRET
    pod = _pod(user)
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "orders-cert"
    assert "SKIFF_TLS_CA" not in _tls_env(pod)
    assert _tls_env(_pod(user, user_secret_has_ca=True))["SKIFF_TLS_CA"] == (
        "/etc/skiff/tls/ca.crt"
    )
    (group,) = render_broker(user, BROKER)
    assert group.config_map["data"]["SKIFF_TLS_MODE"] == "enforcing"


def test_cert_manager_pods_mount_the_secret_cert_manager_writes() -> None:
    issued = spec(tls={"issuerRef": {"name": "internal-ca", "kind": "ClusterIssuer"}})
    assert issued.tls.source == CertificateSource.CERT_MANAGER
    assert [v["secret"]["secretName"] for v in _pod(issued)["volumes"] if "secret" in v] == [
        "orders-tls"
    ]
    assert "SKIFF_TLS_CA" in _tls_env(_pod(issued))


def test_disabled_mounts_no_certificate() -> None:
    pod = _pod(spec(tls={"mode": "disabled"}))
    assert not any(v["name"] == "tls" for v in pod["volumes"])
    assert _tls_env(pod) == {}


def test_a_renewed_certificate_does_not_restart_the_pods(ca: KeyPair) -> None:
    # The pod template names the Secret, never its contents: renewals change no hash.
    (first,) = render_broker(spec(), BROKER)
    (second,) = render_broker(spec(), BROKER)
    assert first.stateful_set == second.stateful_set
    rendered = str(first.stateful_set)
    assert "BEGIN" not in rendered
    data = first.config_map["data"]
    pod = first.stateful_set["spec"]["template"]["spec"]
    changed = spec(tls={"secretName": "other"})
    (third,) = render_broker(changed, BROKER)
    assert settings_hash(data, pod) != settings_hash(
        third.config_map["data"], third.stateful_set["spec"]["template"]["spec"]
    )


def test_the_cert_manager_certificate_asks_for_every_name_and_both_usages() -> None:
    issued = spec(groups=2, tls={"issuerRef": {"name": "internal-ca"}})
    wanted = certificate_contents(issued, "orders", "shop", "cluster.local")
    certificate = render_certificate(issued, BROKER, wanted)
    assert certificate["apiVersion"] == "cert-manager.io/v1"
    assert certificate["kind"] == "Certificate"
    assert certificate["metadata"]["ownerReferences"][0]["uid"] == BROKER.uid
    body = certificate["spec"]
    assert body["secretName"] == "orders-tls"
    assert body["dnsNames"] == list(wanted.dns_names)
    assert {"server auth", "client auth"} <= set(body["usages"])
    assert body["issuerRef"] == {
        "name": "internal-ca",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    # Renewed with a third of its life left, as the operator's own certificate is.
    assert (body["duration"], body["renewBefore"]) == ("2160h", "720h")


def test_the_managed_secrets_carry_what_the_pods_read(ca: KeyPair) -> None:
    leaf = issue_leaf(ca, "orders", contents(), NOW)
    tls = render_tls_secret(BROKER, leaf, ca.cert_pem)
    assert tls["type"] == "kubernetes.io/tls"
    assert tls["metadata"]["name"] == "orders-tls"
    assert base64.b64decode(tls["data"]["tls.crt"]) == leaf.cert_pem
    assert base64.b64decode(tls["data"]["tls.key"]) == leaf.key_pem
    assert base64.b64decode(tls["data"]["ca.crt"]) == ca.cert_pem
    ca_secret = render_ca_secret(BROKER, ca)
    assert ca_secret["metadata"]["name"] == "orders-ca"
    assert set(ca_secret["data"]) == {"ca.crt", "ca.key"}
    for secret in (tls, ca_secret):
        assert secret["metadata"]["ownerReferences"][0]["uid"] == BROKER.uid
