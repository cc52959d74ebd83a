"""The operator's own calls to the Kubernetes API server, beside kopf's, on ``kubernetes_asyncio``.

The library gives the connection: in a pod, the ServiceAccount's token and CA (the token
re-read as the kubelet rotates it); elsewhere ``$KUBECONFIG`` or ``~/.kube/config``, the
same places kopf logs in from. Skiff keeps only which path each kind lives at and what
each call means.

Invariants:

- Children are written with server-side apply under one field manager, so the operator
  owns exactly the fields it renders and a re-render converges the object whatever was
  there before.
- Bodies go out and answers come back as the API server's JSON (plain dicts), never the
  library's models, which would drop fields they do not know (a Broker's spec).
- Every refusal reaches the handlers as :class:`KubeApiError` with its HTTP status,
  mapped from the library's error in one place (:meth:`KubeClient._request`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

FIELD_MANAGER = "skiff-operator"
REQUEST_TIMEOUT_S = 30.0

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


class KubeClient:
    """``client = await KubeClient.connect()``; ``await client.close()`` when done."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api_client = api_client

    @classmethod
    async def connect(cls) -> KubeClient:
        """The pod's ServiceAccount if there is one, else the kubeconfig."""
        configuration = client.Configuration()
        try:
            try:
                config.load_incluster_config(client_configuration=configuration)
            except ConfigException:
                await config.load_kube_config(client_configuration=configuration)
        except (ConfigException, OSError, ValueError, LookupError, TypeError) as exc:
            reason = " ".join(str(exc).split())
            raise kopf.LoginError(
                f"cannot load Kubernetes credentials ({reason}); run the operator in a pod "
                "with a ServiceAccount, or point KUBECONFIG at a valid kubeconfig"
            ) from None
        return cls(client.ApiClient(configuration))

    async def close(self) -> None:
        await self._api_client.close()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            response = await self._api_client.call_api(
                path,
                method,
                query_params=list((params or {}).items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_S,
            )
            text = (await response.read()).decode(errors="replace")
            if not 200 <= response.status <= 299:
                raise ApiException(status=response.status, reason=text)
        except ApiException as exc:
            message = exc.reason or ""
            with contextlib.suppress(ValueError, AttributeError):
                message = json.loads(message).get("message", message)
            raise KubeApiError(exc.status or 0, message) from None
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
