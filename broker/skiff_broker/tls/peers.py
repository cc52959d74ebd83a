"""How the brokers of one cluster reach each other over TLS (``--tls-ca``).

Two kinds of peer traffic: gRPC calls to another broker's client port (cluster
routes, a master's successor check), and the replication stream.

- gRPC to a peer uses TLS when this broker's own port is ``enforcing`` (its peers run
  with the same settings, so their ports refuse plaintext too) or whenever a CA is
  given; the peer's certificate must chain to ``--tls-ca``.
- Replication runs over mutual TLS when a CA and this broker's certificate are given:
  the master asks for a client certificate and takes only one chaining to the CA,
  the replica checks the master's. The shared-secret proof still runs inside.

Host names: peers are dialled by IP, pod DNS name or Service name, and which one
changes with every rescheduling, so a peer's certificate is checked for the fixed
name :data:`PEER_NAME`, which every broker certificate the cluster's CA signs
carries, instead of the dialled host. The CA is the cluster's own (it signs only
its brokers), so a certificate chaining to it with that name is a broker of this
cluster wherever it runs; a client port's other names stay those clients use.

Invariants: without a CA and outside ``enforcing`` nothing here changes the wire
(plaintext gRPC, replication authenticated by the shared secret only); a broker in
``enforcing`` mode that has peers does not start without a CA.
"""

from __future__ import annotations

import ssl

from ..client.channels import PEER_NAME, PLAINTEXT, ClientTls
from .certificates import covered_names
from .settings import TlsConfig, TlsMode


def peer_client_tls(tls: TlsConfig) -> ClientTls:
    """How this broker's gRPC clients connect to a peer's client port."""
    if not tls.ca_file and tls.mode is not TlsMode.ENFORCING:
        return PLAINTEXT
    return ClientTls(enabled=True, ca_file=tls.ca_file, server_name=PEER_NAME)


def check_peers_can_connect(tls: TlsConfig, *, has_peers: bool) -> None:
    """ValueError saying what to give when peers could not reach each other."""
    if tls.mode is TlsMode.ENFORCING and has_peers and not tls.ca_file:
        raise ValueError(
            "--tls-mode enforcing refuses plaintext, also from this cluster's other brokers: "
            "peers need --tls-ca, the PEM CA that signed every broker's --tls-cert (each "
            f"certificate carrying the DNS name {PEER_NAME})"
        )


def check_carries_peer_name(tls: TlsConfig) -> None:
    """ValueError if peers would refuse this broker's certificate for lacking PEER_NAME."""
    if not tls.ca_file or not tls.cert_file:
        return
    try:
        with open(tls.cert_file, "rb") as f:
            names = covered_names(f.read())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the TLS certificate {tls.cert_file}: {exc}") from None
    if PEER_NAME not in names:
        raise ValueError(
            f"the TLS certificate {tls.cert_file} does not carry the DNS name {PEER_NAME}, "
            "which the cluster's other brokers check it for (it is dialled by changing "
            f"addresses); issue it from --tls-ca with {PEER_NAME} among its names"
        )


def mutual_tls(tls: TlsConfig) -> bool:
    """Whether replication runs over mutual TLS (a CA and this broker's certificate)."""
    return bool(tls.ca_file and tls.cert_file)


def _context(tls: TlsConfig, purpose: ssl.Purpose) -> ssl.SSLContext:
    context = ssl.create_default_context(purpose, cafile=tls.ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert_file, tls.key_file)
    return context


def replication_server_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """The master's side: its certificate; a replica's must chain to the CA (else None)."""
    if not mutual_tls(tls):
        return None
    context = _context(tls, ssl.Purpose.CLIENT_AUTH)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def replication_client_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """The replica's side: its certificate; the master's must chain to the CA (else None)."""
    if not mutual_tls(tls):
        return None
    context = _context(tls, ssl.Purpose.SERVER_AUTH)
    # Checked for PEER_NAME (server_hostname), not the dialled address: see above.
    context.check_hostname = True
    return context
