"""How the operator calls a Broker's admin service: signed as the Broker's super user.

The one place that turns a Broker into client credentials. A Broker with
``spec.auth.enabled`` false gets unsigned calls; otherwise every call is signed with
the keys of its admin Secret (``<broker>-admin``), which the Broker's reconcile
creates once before the pods that read it.

Invariants: a cached key pair belongs to one Broker object (its uid: a Broker deleted
and created again under the same name has a new Secret); it is dropped when a broker
answers UNAUTHENTICATED (``note_failure``), so a Secret replaced by hand is read again,
and when the Broker goes. Nothing else about the Secret is kept.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.credentials import Credentials
from skiff_broker.client.errors import SkiffError, Unauthenticated

from .kube_api import KubeApi
from .naming import ADMIN_ACCESS_KEY, ADMIN_SECRET_KEY, admin_secret_name


class AdminSecretMissing(SkiffError):
    """The Broker enforces authentication but its admin Secret is not there (yet)."""

    code = "ADMIN_SECRET_MISSING"


@dataclasses.dataclass(frozen=True, slots=True)
class AdminAccess:
    """What an admin call to one Broker's brokers needs besides the endpoint."""

    timeout: float
    credentials: Credentials | None = None

    def client(self, endpoint: str) -> AdminClient:
        return AdminClient(endpoint, timeout=self.timeout, credentials=self.credentials)


def auth_enabled(broker_spec: Mapping[str, Any]) -> bool:
    """The CRD's default (on) for a spec that leaves ``auth`` out."""
    return bool((broker_spec.get("auth") or {}).get("enabled", True))


def credentials_from_secret(secret: Mapping[str, Any]) -> Credentials:
    """The super user's keys from the admin Secret; KeyError/ValueError if it lacks them."""
    data = secret.get("data") or {}
    return Credentials(
        base64.b64decode(data[ADMIN_ACCESS_KEY]).decode(),
        base64.b64decode(data[ADMIN_SECRET_KEY]).decode(),
    )


class AdminCredentials:
    """Credentials per Broker, read through the operator's API client and cached."""

    def __init__(self, api: KubeApi, timeout: float) -> None:
        self._api = api
        self._timeout = timeout
        # (namespace, broker name) -> (Broker uid, its super user)
        self._cache: dict[tuple[str, str], tuple[str, Credentials]] = {}

    async def access(self, broker: Mapping[str, Any]) -> AdminAccess:
        """How to call ``broker``'s admin service (the Broker object as stored).

        Raises AdminSecretMissing, saying what to do, when auth is on and the Secret
        is missing or unreadable.
        """
        if not auth_enabled(broker.get("spec") or {}):
            return AdminAccess(self._timeout)
        metadata = broker["metadata"]
        key = (metadata["namespace"], metadata["name"])
        uid = str(metadata.get("uid") or "")
        cached = self._cache.get(key)
        if cached is not None and cached[0] == uid:
            return AdminAccess(self._timeout, cached[1])
        name = admin_secret_name(metadata["name"])
        secret = await self._api.get("Secret", metadata["namespace"], name)
        if secret is None:
            raise AdminSecretMissing(
                f"Broker {metadata['name']!r} enforces authentication but its admin Secret "
                f"{name} does not exist yet; the operator creates it when it reconciles the "
                "Broker (see the Broker's status)"
            )
        try:
            credentials = credentials_from_secret(secret)
        except (KeyError, ValueError) as exc:
            raise AdminSecretMissing(
                f"Secret {name} lacks the super user's keys ({exc}); delete it and restart "
                "the Broker's pods: the operator creates a new one"
            ) from None
        self._cache[key] = (uid, credentials)
        return AdminAccess(self._timeout, credentials)

    def note_failure(self, namespace: str, broker: str, error: BaseException) -> None:
        """A refused signature may mean the Secret changed: read it again next time."""
        if isinstance(error, Unauthenticated):
            self._cache.pop((namespace, broker), None)

    def forget(self, namespace: str, broker: str) -> None:
        self._cache.pop((namespace, broker), None)
