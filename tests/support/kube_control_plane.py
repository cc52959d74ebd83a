"""A real Kubernetes control plane for tests: etcd and kube-apiserver on loopback ports.

The binaries come from ``scripts/k8s-binaries`` (built from their Go modules, cached under
``${XDG_CACHE_HOME:-~/.cache}/skiff/k8s/<version>/bin``; ``SKIFF_K8S_BIN`` names another
folder). The API server runs with RBAC authorization; the test administrator is a static
token in ``system:masters``. No scheduler or kubelet runs, and the controller manager only
with the controllers a test starts (``running_controllers``): objects are stored and validated,
nothing runs them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import yaml

KUBE_VERSION = "v1.34.4"  # scripts/k8s-binaries builds this version
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm")
ADMIN_TOKEN = "skiff-test-admin-token"
REPO_ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE_S = 120.0


def binaries_dir() -> Path | None:
    """The folder holding all four binaries, or None."""
    explicit = os.environ.get("SKIFF_K8S_BIN")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    candidates = [Path(explicit)] if explicit else []
    candidates.append(cache / "skiff" / "k8s" / KUBE_VERSION / "bin")
    for folder in candidates:
        if all(os.access(folder / name, os.X_OK) for name in BINARIES):
            return folder
    return None


# Ports handed out by free_port in this process: none is handed out twice.
_HANDED_OUT: set[int] = set()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free loopback TCP port below the kernel's ephemeral range, for later use.

    A port taken with bind(0) and released can be handed by the kernel to any socket
    bound to port 0 before its user binds it (a broker's own loopback ports, a client's
    connection): one from below the ephemeral range cannot.
    """
    top = _ephemeral_low()
    for _ in range(1000):
        port = random.randrange(max(1024, top - 10000), top)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free loopback port below {top}")


def write_kubeconfig(path: Path, server: str, ca_path: Path, token: str, user: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_path)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "test", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config))
    return path


@dataclasses.dataclass
class ControlPlane:
    bin_dir: Path
    work_dir: Path
    server: str
    ca_path: Path
    kubeconfig: Path
    processes: list[subprocess.Popen] = dataclasses.field(default_factory=list)

    def tool(self, name: str) -> str:
        return str(self.bin_dir / name)

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Runs kubectl as the administrator (or with ``kubeconfig``)."""
        result = subprocess.run(
            [self.tool("kubectl"), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
            )
        return result

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        args = ["get", kind, name, "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        result = self.kubectl(*args, check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr:
                return None
            raise AssertionError(f"kubectl get {kind} {name}: {result.stderr}")
        return json.loads(result.stdout)

    def apply(self, manifests: Sequence[Mapping] | str, *extra: str) -> str:
        text = manifests if isinstance(manifests, str) else yaml.safe_dump_all(list(manifests))
        return self.kubectl("apply", "-f", "-", *extra, input=text).stdout

    def helm(self, *args: str) -> str:
        result = subprocess.run(
            [self.tool("helm"), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={
                **os.environ,
                "HELM_CACHE_HOME": str(self.work_dir / "helm-cache"),
                "HELM_CONFIG_HOME": str(self.work_dir / "helm-config"),
                "HELM_DATA_HOME": str(self.work_dir / "helm-data"),
            },
        )
        if result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout + result.stderr

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


@contextlib.contextmanager
def running_controllers(plane: ControlPlane, *controllers: str) -> Iterator[subprocess.Popen]:
    """kube-controller-manager running only ``controllers`` (e.g. the garbage collector)."""
    log_path = plane.work_dir / "kube-controller-manager.log"
    process = _start(
        [
            plane.tool("kube-controller-manager"),
            "--kubeconfig", str(plane.kubeconfig),
            "--controllers", ",".join(controllers),
            "--leader-elect=false",
            "--secure-port", "0",
        ],
        log_path,
    )  # fmt: skip
    try:
        time.sleep(0.5)
        if process.poll() is not None:
            raise AssertionError(f"kube-controller-manager exited:\n{_tail(log_path)}")
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _rsa_private_key_pem() -> bytes:
    """The key that signs ServiceAccount tokens (TokenRequest) and verifies them."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _start(command: list[str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL)


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


@contextlib.contextmanager
def running_control_plane(bin_dir: Path, work_dir: Path) -> Iterator[ControlPlane]:
    work_dir.mkdir(parents=True, exist_ok=True)
    etcd_port, etcd_peer_port, api_port = free_port(), free_port(), free_port()
    etcd_log = work_dir / "etcd.log"
    api_log = work_dir / "kube-apiserver.log"
    etcd = _start(
        [
            str(bin_dir / "etcd"),
            "--data-dir", str(work_dir / "etcd"),
            "--name", "test",
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer_port}",
            "--initial-cluster", f"test=http://127.0.0.1:{etcd_peer_port}",
            # Test data need not survive a power cut; fsync would slow every write.
            "--unsafe-no-fsync",
        ],
        etcd_log,
    )  # fmt: skip
    plane = ControlPlane(
        bin_dir=bin_dir,
        work_dir=work_dir,
        server=f"https://127.0.0.1:{api_port}",
        ca_path=work_dir / "certs" / "apiserver.crt",
        kubeconfig=work_dir / "admin.kubeconfig",
        processes=[etcd],
    )
    try:
        signing_key = work_dir / "service-account.key"
        signing_key.write_bytes(_rsa_private_key_pem())
        tokens = work_dir / "tokens.csv"
        tokens.write_text(f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n')
        api = _start(
            [
                str(bin_dir / "kube-apiserver"),
                "--etcd-servers", f"http://127.0.0.1:{etcd_port}",
                "--bind-address", "127.0.0.1",
                "--advertise-address", "127.0.0.1",
                "--secure-port", str(api_port),
                # Writes a self-signed serving certificate (and its CA) here.
                "--cert-dir", str(work_dir / "certs"),
                "--authorization-mode", "RBAC",
                "--token-auth-file", str(tokens),
                "--service-account-issuer", "https://kubernetes.default.svc",
                "--service-account-key-file", str(signing_key),
                "--service-account-signing-key-file", str(signing_key),
                "--service-cluster-ip-range", "10.0.0.0/24",
                "--enable-priority-and-fairness=false",
            ],
            api_log,
        )  # fmt: skip
        plane.processes.append(api)
        deadline = time.monotonic() + START_DEADLINE_S
        while not plane.ca_path.exists():
            if api.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"kube-apiserver did not start:\n{_tail(api_log)}")
            time.sleep(0.2)
        write_kubeconfig(plane.kubeconfig, plane.server, plane.ca_path, ADMIN_TOKEN, "admin")
        while True:
            probe = plane.kubectl("get", "--raw", "/readyz", check=False)
            if probe.returncode == 0 and probe.stdout.strip() == "ok":
                break
            for process, log in ((etcd, etcd_log), (api, api_log)):
                if process.poll() is not None:
                    raise AssertionError(f"{log.stem} exited:\n{_tail(log)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"kube-apiserver not ready: {probe.stderr}\n{_tail(api_log)}")
            time.sleep(0.5)
        yield plane
    finally:
        plane.stop()
