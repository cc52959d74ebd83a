"""A small client of the Kubernetes API server: the few calls a broker makes.

Credentials come from a kubeconfig (``SKIFF_KUBECONFIG``; a token or client
certificate, and the cluster's CA) or, inside a pod, from the mounted
service-account token and CA with ``KUBERNETES_SERVICE_HOST``/``PORT``. Calls
are blocking (``urllib``); the broker runs them in a worker thread. Every
update carries the object's ``resourceVersion``, so the API server refuses
one based on a stale read with 409 Conflict (:class:`Conflict`).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
REQUEST_TIMEOUT_S = 5.0


class KubeError(Exception):
    """The API server refused or could not be reached; the message says what to check."""


class Conflict(KubeError):
    """The object changed since it was read (or already exists)."""


class NotFound(KubeError):
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class Credentials:
    server: str
    token: str = ""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    insecure: bool = False


def _materialize(data_b64: str, suffix: str) -> str:
    """Kubeconfig ``*-data`` fields as a file ssl can load."""
    handle = tempfile.NamedTemporaryFile(delete=False, suffix=suffix)  # noqa: SIM115
    with handle:
        handle.write(base64.b64decode(data_b64))
    return handle.name


def credentials_from_kubeconfig(path: str) -> Credentials:
    import yaml

    try:
        with open(path) as file:
            config = yaml.safe_load(file)
        context_name = config["current-context"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    except (OSError, KeyError, StopIteration, TypeError, yaml.YAMLError) as exc:
        raise KubeError(
            f"cannot read kubeconfig {path}: {exc!r}; check SKIFF_KUBECONFIG points at a "
            "kubeconfig with a current context"
        ) from None
    ca_file = cluster.get("certificate-authority", "")
    if cluster.get("certificate-authority-data"):
        ca_file = _materialize(cluster["certificate-authority-data"], ".crt")
    cert_file = user.get("client-certificate", "")
    if user.get("client-certificate-data"):
        cert_file = _materialize(user["client-certificate-data"], ".crt")
    key_file = user.get("client-key", "")
    if user.get("client-key-data"):
        key_file = _materialize(user["client-key-data"], ".key")
    token = user.get("token", "")
    if not token and user.get("tokenFile"):
        with open(user["tokenFile"]) as file:
            token = file.read().strip()
    return Credentials(
        server=cluster["server"].rstrip("/"),
        token=token,
        ca_file=ca_file,
        cert_file=cert_file,
        key_file=key_file,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
    )


def in_cluster_credentials() -> Credentials:
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    token_path = os.path.join(SERVICE_ACCOUNT_DIR, "token")
    if not host or not os.path.exists(token_path):
        raise KubeError(
            "not running in a Kubernetes pod (no KUBERNETES_SERVICE_HOST or service-account "
            "token); set SKIFF_KUBECONFIG to a kubeconfig, or run without --role LEASE"
        )
    if ":" in host:
        host = f"[{host}]"
    return Credentials(
        server=f"https://{host}:{port}",
        ca_file=os.path.join(SERVICE_ACCOUNT_DIR, "ca.crt"),
        # Read on each call: the kubelet rotates the projected token.
        token="@" + token_path,
    )


class KubeApi:
    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        context = ssl.create_default_context(cafile=credentials.ca_file or None)
        if credentials.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if credentials.cert_file:
            context.load_cert_chain(credentials.cert_file, credentials.key_file or None)
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))

    @classmethod
    def from_environment(cls, kubeconfig: str = "") -> KubeApi:
        if kubeconfig:
            return cls(credentials_from_kubeconfig(kubeconfig))
        return cls(in_cluster_credentials())

    def _token(self) -> str:
        token = self.credentials.token
        if token.startswith("@"):
            with open(token[1:]) as file:
                return file.read().strip()
        return token

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.credentials.server + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        token = self._token()
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with self._opener.open(request, timeout=REQUEST_TIMEOUT_S) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            with contextlib.suppress(ValueError, AttributeError):
                detail = json.loads(detail).get("message", detail)
            if exc.code == 409:
                raise Conflict(detail) from None
            if exc.code == 404:
                raise NotFound(detail) from None
            if exc.code in (401, 403):
                raise KubeError(
                    f"{method} {path} refused ({exc.code}): {detail}; give the broker's "
                    "ServiceAccount the Role for leases, pods and configmaps"
                ) from None
            raise KubeError(f"{method} {path} failed ({exc.code}): {detail}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise KubeError(
                f"cannot reach the Kubernetes API server at {self.credentials.server}: {exc}"
            ) from None

    # -- the calls a broker makes ------------------------------------------

    def get_lease(self, namespace: str, name: str) -> dict:
        return self.request("GET", f"{_leases(namespace)}/{name}")

    def create_lease(self, namespace: str, lease: dict) -> dict:
        return self.request("POST", _leases(namespace), lease)

    def replace_lease(self, namespace: str, lease: dict) -> dict:
        """PUT with the lease's resourceVersion: Conflict if anyone wrote it since."""
        name = lease["metadata"]["name"]
        return self.request("PUT", f"{_leases(namespace)}/{name}", lease)

    def list_leases(self, namespace: str, label_selector: str) -> list[dict]:
        query = urllib.parse.urlencode({"labelSelector": label_selector})
        return self.request("GET", f"{_leases(namespace)}?{query}").get("items", [])

    def label_pod(self, namespace: str, name: str, labels: dict[str, str]) -> None:
        self.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            {"metadata": {"labels": labels}},
            content_type="application/merge-patch+json",
        )

    def get_config_map(self, namespace: str, name: str) -> dict:
        return self.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")


def _leases(namespace: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
