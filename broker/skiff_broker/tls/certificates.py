"""The broker's TLS certificate: files the operator gives, or one the broker makes itself.

Invariants:
- A self-signed certificate lives in ``<data-dir>/tls/`` (key file mode 0600) and is reused
  across restarts as long as it covers every name it must (localhost, 127.0.0.1, the host
  name, the advertised host); otherwise it is replaced.
- Certificate files are looked at on every TLS handshake (one ``stat`` each); when they
  change, the next handshake uses the new pair. A pair that cannot be read (say, half
  written) leaves the previous one in use and is logged.
- The server's TLS offers HTTP/2 by ALPN (gRPC clients require it) and nothing older
  than TLS 1.2.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import socket
import ssl
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # For annotations only; the functions import cryptography where they use it.
    from cryptography import x509

log = logging.getLogger(__name__)

SELF_SIGNED_DIR = "tls"
SELF_SIGNED_CERT = "self-signed.crt"
SELF_SIGNED_KEY = "self-signed.key"
_SELF_SIGNED_DAYS = 3650


def names_to_cover(*endpoints: str) -> list[str]:
    """localhost, 127.0.0.1, this host's name and the hosts of ``endpoints`` (HOST:PORT)."""
    names = ["localhost", "127.0.0.1", socket.gethostname()]
    for endpoint in endpoints:
        host = endpoint.rpartition(":")[0].strip("[]") if ":" in endpoint else endpoint
        if host and host not in ("0.0.0.0", "::"):
            names.append(host)
    return list(dict.fromkeys(names))


def _general_name(name: str) -> x509.GeneralName:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def covered_names(cert_pem: bytes) -> set[str]:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_pem)
    if cert.not_valid_after_utc < datetime.datetime.now(datetime.UTC):
        return set()
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n.value) for n in san}


def self_signed(data_dir: str, names: list[str]) -> tuple[str, str]:
    """Paths of the data directory's self-signed certificate and key, made if needed."""
    directory = os.path.join(data_dir, SELF_SIGNED_DIR)
    cert_path = os.path.join(directory, SELF_SIGNED_CERT)
    key_path = os.path.join(directory, SELF_SIGNED_KEY)
    try:
        with open(cert_path, "rb") as f:
            if set(names) <= covered_names(f.read()) and os.path.exists(key_path):
                return cert_path, key_path
    except (OSError, ValueError):
        pass
    cert_pem, key_pem = _make_self_signed(names)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    # Exactly 0700: not group-listable, nor set-group-ID inherited from the data directory.
    os.chmod(directory, 0o700)
    _write_new(key_path, key_pem, 0o600)
    _write_new(cert_path, cert_pem, 0o600)
    log.info(
        "made a self-signed TLS certificate for %s in %s (give --tls-cert/--tls-key to use "
        "your own)",
        ", ".join(names),
        cert_path,
    )
    return cert_path, key_path


def _write_new(path: str, data: bytes, mode: int) -> None:
    # Written beside and renamed: a crash leaves the old file or the new one, never half.
    partial = path + ".new"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(partial, path)


def _make_self_signed(names: list[str]) -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _check_pair(cert_pem: bytes, key_pem: bytes) -> None:
    """ValueError unless the key is the certificate's (say, one file replaced, not yet both)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    public = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(*public) != key.public_key().public_bytes(*public):
        raise ValueError("the private key does not belong to the certificate")


class ReloadingCertificate:
    """The server's TLS context, following the certificate and key files."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._lock = threading.Lock()
        self._seen = self._stamp()
        self._unreadable: tuple | None = None
        self._current = self._load()

    def _stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in (self.cert_file, self.key_file):
            st = os.stat(path)
            stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(stamps)

    def _load(self) -> ssl.SSLContext:
        with open(self.key_file, "rb") as f:
            key = f.read()
        with open(self.cert_file, "rb") as f:
            cert = f.read()
        if b"PRIVATE KEY" not in key or b"CERTIFICATE" not in cert:
            raise ValueError(
                f"{self.cert_file} and {self.key_file} must be a PEM certificate and key"
            )
        _check_pair(cert, key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["h2"])
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except ssl.SSLError as exc:
            raise ValueError(str(exc)) from None
        return context

    def _refresh(self) -> None:
        """Re-read the files if they changed (a pair that does not load is not taken)."""
        with self._lock:
            stamp = None
            try:
                stamp = self._stamp()
                if stamp != self._seen and stamp != self._unreadable:
                    self._current = self._load()
                    self._seen = stamp
                    log.info("TLS certificate reloaded from %s", self.cert_file)
            except (OSError, ValueError) as exc:
                # Once per change of the files, not once per handshake.
                if stamp is None or stamp != self._unreadable:
                    log.warning(
                        "keeping the TLS certificate in use: cannot read the new one (%s); "
                        "write the certificate and key as PEM files",
                        exc,
                    )
                self._unreadable = stamp

    def ssl_context(self) -> ssl.SSLContext:
        """The context for the next handshake: the files' current pair."""
        self._refresh()
        return self._current
