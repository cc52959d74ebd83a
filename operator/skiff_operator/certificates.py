"""The brokers' certificate: what it must contain, when to re-issue it, and the operator's CA.

Invariants:
- ``certificate_contents`` and ``reissue_reason`` are pure: the same arguments give the
  same answer, nothing is read from the clock or the network (``now`` is an argument).
- The certificate names every host clients and peers use: the bootstrap Service, each
  group's client Service and each group's pods (through the headless Service), in their
  short and fully qualified forms, the external host of ``spec.externalAccess``, and
  ``PEER_NAME``, which brokers (dialled by changing pod addresses) are checked for by
  their peers and by the operator.
- A leaf is re-issued when it was not issued by the Broker's CA, names other hosts than
  wanted, lacks server or client auth, or has less than a third of its life left. The
  CA is long-lived and kept: the brokers of a cluster trust one another through it.
- Keys are ECDSA P-256; only ``new_ca`` and ``issue_leaf`` draw random numbers.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from skiff_broker.client.channels import PEER_NAME

from .broker_spec import BrokerSpec
from .naming import bootstrap_service_name, group_name, headless_service_name

LEAF_LIFETIME = datetime.timedelta(days=90)
CA_LIFETIME = datetime.timedelta(days=3650)
# Certificates start a little in the past: a node whose clock runs behind still accepts them.
BACKDATE = datetime.timedelta(minutes=5)
# The usages the brokers need: serving clients and peers, and calling peers.
USAGES = ("server auth", "client auth")
_USAGE_OIDS = {
    "server auth": ExtendedKeyUsageOID.SERVER_AUTH,
    "client auth": ExtendedKeyUsageOID.CLIENT_AUTH,
}


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateContents:
    """What the brokers' certificate must say."""

    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...] = ()
    usages: tuple[str, ...] = USAGES
    lifetime: datetime.timedelta = LEAF_LIFETIME


@dataclasses.dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes


def _service_names(service: str, namespace: str, cluster_domain: str) -> list[str]:
    """Every form of a Service's name a client inside the cluster may dial."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{cluster_domain}",
    ]


def certificate_contents(
    spec: BrokerSpec, broker: str, namespace: str, cluster_domain: str
) -> CertificateContents:
    """The names and usages of the certificate every pod of the Broker presents."""
    names = [PEER_NAME, *_service_names(bootstrap_service_name(broker), namespace, cluster_domain)]
    for index in range(spec.groups):
        names += _service_names(group_name(broker, index), namespace, cluster_domain)
        pods = headless_service_name(broker, index)
        # <pod>.<headless service>: each pod's own stable name.
        names += [f"*.{pods}.{namespace}.svc", f"*.{pods}.{namespace}.svc.{cluster_domain}"]
    ips: list[str] = []
    host = spec.external_access.advertised_host
    if spec.external_access.enabled and host:
        if _is_ip(host):
            ips.append(str(ipaddress.ip_address(host)))
        else:
            names.append(host.lower())
    return CertificateContents(tuple(sorted(set(names))), tuple(sorted(set(ips))))


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def new_ca(broker: str, namespace: str, now: datetime.datetime) -> KeyPair:
    """A new CA for one Broker: it signs the brokers' certificate and nothing else."""
    key = _new_key()
    # A CN is at most 64 characters; a Broker name at most 40.
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "skiff"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, namespace[:64]),
            x509.NameAttribute(NameOID.COMMON_NAME, f"{broker} CA"),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_leaf(
    ca: KeyPair, broker: str, contents: CertificateContents, now: datetime.datetime
) -> KeyPair:
    """A new key and certificate with ``contents``, signed by ``ca``, valid from ``now``."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an ECDSA key")
    key = _new_key()
    alt_names: list[x509.GeneralName] = [x509.DNSName(n) for n in contents.dns_names]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in contents.ip_addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, broker)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + contents.lifetime)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([_USAGE_OIDS[u] for u in contents.usages]), critical=False
        )
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def not_after(cert_pem: bytes) -> datetime.datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def ca_problem(ca: KeyPair) -> str:
    """Why ``ca`` cannot sign the brokers' certificate; "" if it can."""
    try:
        cert = x509.load_pem_x509_certificate(ca.cert_pem)
        key = serialization.load_pem_private_key(ca.key_pem, password=None)
    except ValueError as exc:
        return f"it cannot be read ({exc})"
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        return "its key is not an ECDSA key"
    if key.public_key() != cert.public_key():
        return "its ca.key does not belong to its ca.crt"
    return ""


def reissue_reason(
    leaf_pair: KeyPair, ca_cert_pem: bytes, wanted: CertificateContents, now: datetime.datetime
) -> str:
    """Why the leaf must be issued anew ("" if it is good as it is)."""
    try:
        leaf = x509.load_pem_x509_certificate(leaf_pair.cert_pem)
        leaf_key = serialization.load_pem_private_key(leaf_pair.key_pem, password=None)
        ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    except (ValueError, TypeError):
        return "the certificate or its key cannot be read"
    if leaf_key.public_key() != leaf.public_key():
        return "the key does not belong to the certificate"
    try:
        leaf.verify_directly_issued_by(ca_cert)
    except (InvalidSignature, ValueError, TypeError):
        return "the certificate was not issued by the Broker's CA"
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return "the certificate lacks names or usages"
    names = tuple(sorted(san.get_values_for_type(x509.DNSName)))
    ips = tuple(sorted(str(ip) for ip in san.get_values_for_type(x509.IPAddress)))
    if (names, ips) != (wanted.dns_names, wanted.ip_addresses):
        return "the names the Broker is reached by changed"
    if any(_USAGE_OIDS[u] not in usages for u in wanted.usages):
        return "the certificate lacks server or client auth"
    life = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    left = leaf.not_valid_after_utc - now
    if left < life / 3:
        return "less than a third of the certificate's life is left"
    return ""
