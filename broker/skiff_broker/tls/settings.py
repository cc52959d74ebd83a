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


class TlsMode(enum.StrEnum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


@dataclasses.dataclass(slots=True)
class TlsConfig:
    mode: TlsMode = TlsMode.PERMISSIVE
    # PEM files; both or neither. Re-read when they change on disk.
    cert_file: str = ""
    key_file: str = ""
    # PEM CA bundle the cluster's brokers trust for each other (tls/peers.py); empty: none.
    ca_file: str = ""

    def validate(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError(
                "--tls-cert and --tls-key go together: give both, or neither for a "
                "self-signed certificate in the data directory"
            )
        if self.ca_file and not os.path.isfile(self.ca_file):
            raise ValueError(f"--tls-ca {self.ca_file} is not a file; give the PEM CA bundle")
