"""How the client port treats TLS.

``disabled``: plaintext only, served by gRPC directly (no extra hop).
``permissive`` (the default): TLS and plaintext on the same port, told apart by the first
byte a client sends (the RocketMQ 5 proxy serves both on one port too).
``enforcing``: TLS only; a plaintext connection is closed and the broker logs it.

With no certificate files the broker makes a self-signed certificate in its data directory.
A CA (``ca_file``) is what brokers of one cluster verify each other with (:mod:`.peers`).
"""

from __future__ import annotations

import dataclasses
import enum
import os

from ..wire.setting import option


class TlsMode(enum.StrEnum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


@dataclasses.dataclass(slots=True)
class TlsConfig:
    mode: TlsMode = option(
        TlsMode.PERMISSIVE,
        "--tls-mode",
        "SKIFF_TLS_MODE",
        "TLS on the client port(s): permissive serves TLS and plaintext on the same port, "
        "enforcing only TLS (plaintext connections are closed and logged), disabled only "
        "plaintext.",
    )
    # PEM files; both or neither. Re-read when they change on disk.
    cert_file: str = option(
        "",
        "--tls-cert",
        "SKIFF_TLS_CERT",
        "PEM certificate (chain) for TLS, re-read when it changes; without it the broker "
        "makes a self-signed one in <data-dir>/tls/.",
        kind="file",
    )
    key_file: str = option(
        "",
        "--tls-key",
        "SKIFF_TLS_KEY",
        "PEM private key of --tls-cert, re-read when it changes.",
        kind="file",
    )
    # Used by tls/peers.py; empty: none.
    ca_file: str = option(
        "",
        "--tls-ca",
        "SKIFF_TLS_CA",
        "PEM CA bundle this cluster's brokers trust for each other: calls to other brokers "
        "use TLS verified against it, and replication runs over mutual TLS (with --tls-cert, "
        "which must carry the DNS name skiff-broker). Needed with --tls-mode enforcing when "
        "the broker has peers.",
        kind="file",
    )

    def validate(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError(
                "--tls-cert and --tls-key go together: give both, or neither for a "
                "self-signed certificate in the data directory"
            )
        if self.ca_file and not os.path.isfile(self.ca_file):
            raise ValueError(f"--tls-ca {self.ca_file} is not a file; give the PEM CA bundle")
