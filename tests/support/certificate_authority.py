"""A throwaway certificate authority for tests: a CA and the broker certificates it signs."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from skiff_broker.tls.peers import PEER_NAME


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(
        now + datetime.timedelta(days=1)
    )


@dataclasses.dataclass
class CertificateAuthority:
    directory: Path
    name: str = "test-ca"

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._cert = (
            _validity(x509.CertificateBuilder())
            .subject_name(_name(self.name))
            .issuer_name(_name(self.name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = self.directory / f"{self.name}.crt"
        self.ca_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, holder: str, names: tuple[str, ...] = (PEER_NAME,)) -> tuple[Path, Path]:
        """A leaf certificate for ``names`` (DNS names or IPs) and its key file."""
        key = ec.generate_private_key(ec.SECP256R1())
        alternatives: list[x509.GeneralName] = []
        for name in (*names, "localhost", "127.0.0.1"):
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        cert = (
            _validity(x509.CertificateBuilder())
            .subject_name(_name(holder))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        cert_file = self.directory / f"{holder}.crt"
        key_file = self.directory / f"{holder}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_file, key_file

    def broker_args(self, holder: str, *, ca: Path | None = None) -> tuple[str, ...]:
        """``--tls-cert/--tls-key`` of a new certificate and ``--tls-ca`` (this CA unless given)."""
        cert_file, key_file = self.issue(holder)
        return (
            *("--tls-cert", str(cert_file), "--tls-key", str(key_file)),
            *("--tls-ca", str(ca or self.ca_file)),
        )
