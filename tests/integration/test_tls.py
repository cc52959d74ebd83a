"""TLS on the client port, against real broker processes.

Permissive (the default) serves TLS and plaintext on one port; enforcing closes plaintext
connections and says so in the log; disabled is plaintext only. Certificate files given to
the broker are picked up by the next handshake after they change. The official Python
client runs in its own process (tests/support/official_client_roundtrip.py) so that its TLS trusts
the broker's self-signed certificate through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH.
"""

from __future__ import annotations

import datetime
import os
import ssl
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.support.broker_process import SKIFF, broker_command, broker_env, running_broker
from tests.support.kube_control_plane import free_port

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.channels import ClientTls
from skiff_broker.client.errors import SkiffError

ROUNDTRIP = Path(__file__).resolve().parent.parent / "support" / "official_client_roundtrip.py"
DEADLINE_S = 60.0
# Enforcing without --tls-ca is for a broker without peers: no replication port either.
ENFORCING_ALONE = ("--tls-mode", "enforcing", "--ha-listen", "")


def _self_signed_cert(data_dir: Path) -> Path:
    return data_dir / "tls" / "self-signed.crt"


def _roundtrip(endpoint: str, tls: bool, ca: Path | None = None) -> subprocess.CompletedProcess:
    body = f"body-{uuid.uuid4().hex[:8]}"
    env = broker_env()
    if ca is not None:
        env["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(ca)
    # A topic of its own: a new group reads a topic from its start.
    topic_group = (f"tls-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}")
    done = subprocess.run(
        [sys.executable, str(ROUNDTRIP), endpoint, *topic_group, body, "tls" if tls else "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    done.body = body  # type: ignore[attr-defined]
    return done


def _skiff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SKIFF, *args], env=broker_env(), capture_output=True, text=True, timeout=60
    )


def _refusal_lines(broker) -> list[str]:  # type: ignore[no-untyped-def]
    return [r["msg"] for r in broker.log_lines() if "plaintext connection" in r.get("msg", "")]


def test_permissive_port_serves_the_official_client_with_and_without_tls(tmp_path):
    with running_broker(tmp_path, "--auto-create-topics") as broker:
        cert = _self_signed_cert(broker.data_dir)
        plain = _roundtrip(broker.endpoint, tls=False)
        assert plain.returncode == 0, plain.stderr[-2000:]
        assert plain.stdout.split() == [plain.body]
        secure = _roundtrip(broker.endpoint, tls=True, ca=cert)
        assert secure.returncode == 0, secure.stderr[-2000:]
        assert secure.stdout.split() == [secure.body]
        # What the broker presents is its self-signed certificate, for the loopback address.
        presented = ssl.get_server_certificate(("127.0.0.1", int(broker.endpoint.split(":")[1])))
        assert presented.strip() == cert.read_text().strip()


def test_self_signed_certificate_is_private_and_kept_across_restarts(tmp_path):
    with running_broker(tmp_path) as broker:
        cert = _self_signed_cert(broker.data_dir)
        first = cert.read_bytes()
        key_mode = stat.S_IMODE(os.stat(cert.with_suffix(".key")).st_mode)
    assert key_mode == 0o600
    with running_broker(tmp_path):
        assert cert.read_bytes() == first


def test_enforcing_refuses_plaintext_and_logs_how_to_allow_it(tmp_path):
    with running_broker(tmp_path, *ENFORCING_ALONE, "--auto-create-topics") as broker:
        cert = _self_signed_cert(broker.data_dir)
        for _ in range(3):
            with pytest.raises(SkiffError), AdminClient(broker.endpoint, timeout=5) as admin:
                admin.list_topics()
        with AdminClient(broker.endpoint, tls=ClientTls(True, str(cert))) as admin:
            admin.list_topics()
        secure = _roundtrip(broker.endpoint, tls=True, ca=cert)
        assert secure.returncode == 0, secure.stderr[-2000:]
        lines = _refusal_lines(broker)
    # Rate-limited: several refusals, one line, which names the way out.
    assert len(lines) == 1, lines
    assert "--tls-mode permissive" in lines[0]


def test_disabled_mode_is_plaintext_only_with_no_certificate(tmp_path):
    with running_broker(tmp_path, "--tls-mode", "disabled", "--auto-create-topics") as broker:
        plain = _roundtrip(broker.endpoint, tls=False)
        assert plain.returncode == 0, plain.stderr[-2000:]
        with (
            pytest.raises(SkiffError),
            AdminClient(broker.endpoint, timeout=5, tls=ClientTls(True, verify=True)) as admin,
        ):
            admin.list_topics()
        assert not (broker.data_dir / "tls").exists()


def _write_pair(directory: Path, common_name: str) -> tuple[Path, Path, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost")]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Replaced the way secret mounts are: new files renamed over the old ones.
    (directory / "tls.key.new").write_bytes(key_pem)
    (directory / "tls.crt.new").write_text(cert_pem)
    os.replace(directory / "tls.key.new", directory / "tls.key")
    os.replace(directory / "tls.crt.new", directory / "tls.crt")
    return directory / "tls.crt", directory / "tls.key", cert_pem


def _presented(endpoint: str) -> str:
    host, _, port = endpoint.rpartition(":")
    return ssl.get_server_certificate((host, int(port))).strip()


def test_certificate_files_are_reloaded_by_the_next_handshake(tmp_path):
    certs = tmp_path / "certs"
    certs.mkdir()
    cert, key, first = _write_pair(certs, "first")
    args = (*ENFORCING_ALONE, "--tls-cert", str(cert), "--tls-key", str(key))
    with running_broker(tmp_path, *args) as broker:
        assert _presented(broker.endpoint) == first.strip()
        _, _, second = _write_pair(certs, "second")
        end = time.monotonic() + DEADLINE_S
        while _presented(broker.endpoint) != second.strip():
            assert time.monotonic() < end, "the new certificate was never presented"
            time.sleep(0.1)
        # Clients verifying against the new certificate (made for localhost) connect.
        port = broker.endpoint.rpartition(":")[2]
        with AdminClient(f"localhost:{port}", tls=ClientTls(True, str(cert))) as admin:
            admin.list_topics()
        assert any("reloaded" in r.get("msg", "") for r in broker.log_lines())


def test_cli_over_tls(tmp_path):
    with running_broker(tmp_path, *ENFORCING_ALONE) as broker:
        cert = str(_self_signed_cert(broker.data_dir))
        ep = ("--endpoint", broker.endpoint)
        created = _skiff("topic", "create", "orders", *ep, "--tls-ca", cert)
        assert created.returncode == 0, created.stderr
        listed = _skiff("topic", "list", *ep, "--tls-insecure")
        assert listed.returncode == 0, listed.stderr
        assert "orders" in listed.stdout
        plain = _skiff("topic", "list", *ep)
        assert plain.returncode == 1
        unverified = _skiff("topic", "list", *ep, "--tls")
        assert unverified.returncode == 1
        assert "--tls-ca" in unverified.stderr


def test_external_listener_follows_the_tls_mode(tmp_path):
    external = f"127.0.0.1:{free_port()}"
    with running_broker(tmp_path, *ENFORCING_ALONE, "--external-listen", external) as b:
        cert = str(_self_signed_cert(b.data_dir))
        with AdminClient(external, tls=ClientTls(True, cert)) as admin:
            admin.list_topics()
        with pytest.raises(SkiffError), AdminClient(external, timeout=5) as admin:
            admin.list_topics()
        lines = _refusal_lines(b)
    assert len(lines) == 1 and "--external-listen" in lines[0], lines


def test_enforcing_with_peers_but_no_ca_does_not_start_and_says_what_to_give(tmp_path):
    # The test brokers' --ha-listen makes this one a replication master: it has peers.
    done = subprocess.run(
        broker_command(tmp_path, "--tls-mode", "enforcing"),
        env=broker_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "peers need --tls-ca" in done.stderr
