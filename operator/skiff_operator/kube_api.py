"""The few Kubernetes API calls the operator makes, over aiohttp (what kopf itself uses).

Children are written with server-side apply under one field manager, so the operator
owns exactly the fields it renders and a re-render converges the object whatever was
there before.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import kopf

FIELD_MANAGER = "skiff-operator"

# kind -> (API path prefix, plural) of every kind the operator touches.
_RESOURCES = {
    "ConfigMap": ("/api/v1", "configmaps"),
    "Secret": ("/api/v1", "secrets"),
    "Service": ("/api/v1", "services"),
    "StatefulSet": ("/apis/apps/v1", "statefulsets"),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets"),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies"),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims"),
    "Pod": ("/api/v1", "pods"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases"),
    "Node": ("/api/v1", "nodes"),
    "Broker": ("/apis/skiff.io/v1alpha1", "brokers"),
    "Topic": ("/apis/skiff.io/v1alpha1", "topics"),
    # cert-manager's, for spec.tls.issuerRef; absent from clusters without cert-manager.
    "Certificate": ("/apis/cert-manager.io/v1", "certificates"),
    # The Prometheus Operator's; a cluster without its CRDs answers 404 for the whole path.
    "PodMonitor": ("/apis/monitoring.coreos.com/v1", "podmonitors"),
}


class KubeApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {status})")
        self.status = status
        self.message = message


class KubeApi:
    """``async with KubeApi(connection) as api: await api.apply(manifest)``."""

    def __init__(self, login: Callable[[], kopf.ConnectionInfo]) -> None:
        """``login`` gives the current credentials; it is asked again after a 401."""
        self._login = login
        self._connection = login()
        self._server = self._connection.server.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> KubeApi:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl_context()),
            timeout=aiohttp.ClientTimeout(total=30),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    def _auth_headers(self) -> dict[str, str]:
        info = self._connection
        if info.token:
            return {"Authorization": f"{info.scheme or 'Bearer'} {info.token}"}
        return {}

    def _ssl_context(self) -> ssl.SSLContext | bool:
        info = self._connection
        if not self._server.startswith("https"):
            return False
        context = ssl.create_default_context(
            cafile=str(info.ca_path) if info.ca_path else None,
            cadata=_pem(info.ca_data) if info.ca_data else None,
        )
        if info.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if info.certificate_path and info.private_key_path:
            context.load_cert_chain(str(info.certificate_path), str(info.private_key_path))
        return context

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        assert self._session is not None, "use KubeApi in 'async with'"
        data = json.dumps(body) if body is not None else None
        for attempt in range(2):
            headers = self._auth_headers()
            if data is not None:
                headers["Content-Type"] = content_type
            async with self._session.request(
                method, self._server + path, data=data, params=params, headers=headers
            ) as response:
                text = await response.text()
                status = response.status
            # A ServiceAccount token is rotated on disk; read it again once.
            if status == 401 and attempt == 0:
                self._connection = self._login()
                continue
            break
        if status >= 400:
            try:
                message = json.loads(text).get("message", text)
            except ValueError:
                message = text
            raise KubeApiError(status, message)
        return json.loads(text) if text else {}

    @staticmethod
    def path(kind: str, namespace: str, name: str = "") -> str:
        """``namespace`` "" for cluster-scoped kinds (Node)."""
        prefix, plural = _RESOURCES[kind]
        scope = f"/namespaces/{namespace}" if namespace else ""
        path = f"{prefix}{scope}/{plural}"
        return f"{path}/{name}" if name else path

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply; creates the object if missing."""
        metadata = manifest["metadata"]
        return await self._request(
            "PATCH",
            self.path(manifest["kind"], metadata["namespace"], metadata["name"]),
            body=manifest,
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    async def create_once(self, manifest: Mapping[str, Any]) -> bool:
        """Create the object unless one of its name exists (then leave it as it is).

        True if it was created. Needs only the create right, not get: an object
        whose contents must not be read back (a Secret) is made this way.
        """
        metadata = manifest["metadata"]
        try:
            await self._request(
                "POST", self.path(manifest["kind"], metadata["namespace"]), body=manifest
            )
        except KubeApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def merge_patch(
        self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch of an object that must exist (unlike apply, never creates it)."""
        return await self._request(
            "PATCH",
            self.path(kind, namespace, name),
            body=patch,
            content_type="application/merge-patch+json",
        )

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._request("GET", self.path(kind, namespace, name))
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(
        self, kind: str, namespace: str, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        params = {"labelSelector": label_selector} if label_selector else None
        response = await self._request("GET", self.path(kind, namespace), params=params)
        return list(response.get("items") or [])

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        try:
            await self._request(
                "DELETE",
                self.path(kind, namespace, name),
                body={"propagationPolicy": "Background"},
            )
        except KubeApiError as exc:
            if exc.status != 404:
                raise


def _pem(data: str | bytes) -> str:
    """A kubeconfig's ``certificate-authority-data`` is base64 of the PEM text."""
    text = data.decode() if isinstance(data, bytes) else data
    return text if text.lstrip().startswith("-----BEGIN") else base64.b64decode(text).decode()
