"""The broker's calls to the Kubernetes API server, on the official ``kubernetes`` client.

Credentials come from a kubeconfig (``SKIFF_KUBECONFIG``) or, inside a pod, from the
mounted service-account token and CA; the library reads both, and re-reads a pod's
projected token as the kubelet rotates it. Calls are blocking; the broker runs them in a
worker thread.

Invariants:

- Objects go in and come out as the API server's JSON (plain dicts, never the library's
  models), so a Lease the broker writes back holds exactly what it read,
  ``resourceVersion`` included: the API
  server refuses an update based on a stale read with 409, raised as :class:`Conflict`.
- The library's errors become Skiff's (:class:`Conflict`, :class:`NotFound`,
  :class:`Forbidden`, else :class:`KubeError`) in one place, :func:`_translated`; the
  election rules (lease_elector.py) catch only these.
- Importing this module does not import the library (only making a client does).
- No call retries on its own: the elector decides what a failed call means and when to
  try again, within its lease timing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import urllib3.exceptions

if TYPE_CHECKING:
    import kubernetes.client

REQUEST_TIMEOUT_S = 5.0


class KubeError(Exception):
    """The API server refused or could not be reached; the message says what to check."""


class Conflict(KubeError):
    """The object changed since it was read (or already exists)."""


class NotFound(KubeError):
    pass


class Forbidden(KubeError):
    """The broker's ServiceAccount may not make this call."""


class KubeClient:
    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.api_client = api_client
        self.server = api_client.configuration.host

    @classmethod
    def from_environment(cls, kubeconfig: str = "") -> KubeClient:
        """``kubeconfig`` if given, else the pod's ServiceAccount."""
        # Imported here: the library takes about a second to import, which a broker
        # without a Lease (most test brokers, every non-Kubernetes one) never pays.
        import kubernetes.client
        import kubernetes.config

        configuration = kubernetes.client.Configuration()
        try:
            if kubeconfig:
                kubernetes.config.load_kube_config(
                    config_file=kubeconfig, client_configuration=configuration
                )
            else:
                kubernetes.config.load_incluster_config(client_configuration=configuration)
        except (kubernetes.config.ConfigException, OSError, ValueError) as exc:
            reason = " ".join(str(exc).split())
            if kubeconfig:
                raise KubeError(
                    f"cannot read kubeconfig {kubeconfig}: {reason}; check SKIFF_KUBECONFIG "
                    "points at a kubeconfig with a current context"
                ) from None
            raise KubeError(
                f"not running in a Kubernetes pod ({reason}); set SKIFF_KUBECONFIG to a "
                "kubeconfig, or run without --role LEASE"
            ) from None
        # urllib3 would otherwise retry a refused connection three times, past a lease's
        # renewal deadline.
        configuration.retries = 0
        return cls(kubernetes.client.ApiClient(configuration))

    def close(self) -> None:
        self.api_client.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
    ) -> dict:
        """One call, the body sent and the answer read as the API server's JSON.

        Bodies bypass the library's models on purpose: a model would rewrite the Lease's
        timestamps and drop fields it does not know.
        """
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self.api_client.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        with _translated(f"{method} {path}", self.server):
            response = self.api_client.call_api(*serialized, _request_timeout=REQUEST_TIMEOUT_S)
            data = response.read()
            if not 200 <= response.status <= 299:
                raise ApiException.from_response(
                    http_resp=response, body=data.decode(errors="replace"), data=None
                )
        return json.loads(data or b"{}")

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
        listed = self.request("GET", _leases(namespace), query={"labelSelector": label_selector})
        return list(listed.get("items") or [])

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


@contextlib.contextmanager
def _translated(what: str, server: str) -> Iterator[None]:
    """The library's errors as Skiff's, each with what to check."""
    from kubernetes.client.exceptions import ApiException

    try:
        yield
    except ApiException as exc:
        detail = exc.reason or ""
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            detail = json.loads(exc.body or "").get("message", detail)
        if exc.status == 409:
            raise Conflict(detail) from None
        if exc.status == 404:
            raise NotFound(detail) from None
        if exc.status in (401, 403):
            raise Forbidden(
                f"{what} refused ({exc.status}): {detail}; give the broker's "
                "ServiceAccount the Role for leases, pods and configmaps"
            ) from None
        raise KubeError(f"{what} failed ({exc.status}): {detail}") from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KubeError(f"cannot reach the Kubernetes API server at {server}: {exc}") from None
