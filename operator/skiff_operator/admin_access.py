"""How the operator calls a Broker's admin service: signed as the Broker's super user.

The one place that turns a Broker into client credentials and TLS settings. A Broker
with ``spec.auth.enabled`` false gets unsigned calls; otherwise every call is signed
with the keys of its admin Secret (``<broker>-admin``), which the Broker's reconcile
creates once before the pods that read it. A Broker whose ports are ``enforcing``
(plaintext refused) is called over TLS verified against the CA in its certificate's
Secret, for the name every broker certificate carries (``PEER_NAME``: pods are dialled
by changing names); a Secret without a CA leaves the check to the system's roots and
the dialled name. Other modes are called in plaintext, which they accept.

Invariants: a cached entry belongs to one Broker object (its uid: a Broker deleted and
created again under the same name has new Secrets) and to the auth and TLS spec it was
made for; it is dropped when a broker answers UNAUTHENTICATED or UNAVAILABLE
(``note_failure``), so a Secret replaced by hand is read again, and when the Broker
goes. Nothing else about the Secrets is kept.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.channels import PEER_NAME, PLAINTEXT, ClientTls
from skiff_broker.client.credentials import Credentials
from skiff_broker.client.errors import BrokerUnavailable, SkiffError, Unauthenticated

from .broker_spec import BrokerSpec
from .kube_client import KubeClient
from .naming import ADMIN_ACCESS_KEY, ADMIN_SECRET_KEY, admin_secret_name
from .rendering import TLS_CA_KEY, mounted_tls_secret


class AdminSecretMissing(SkiffError):
    """The Broker enforces authentication but its admin Secret is not there (yet)."""

    code = "ADMIN_SECRET_MISSING"


@dataclasses.dataclass(frozen=True, slots=True)
class AdminAccess:
    """What an admin call to one Broker's brokers needs besides the endpoint."""

    timeout: float
    credentials: Credentials | None = None
    tls: ClientTls = PLAINTEXT

    def client(self, endpoint: str) -> AdminClient:
        return AdminClient(
            endpoint, timeout=self.timeout, tls=self.tls, credentials=self.credentials
        )


def credentials_from_secret(secret: Mapping[str, Any]) -> Credentials:
    """The super user's keys from the admin Secret; KeyError/ValueError if it lacks them."""
    data = secret.get("data") or {}
    return Credentials(
        base64.b64decode(data[ADMIN_ACCESS_KEY]).decode(),
        base64.b64decode(data[ADMIN_SECRET_KEY]).decode(),
    )


class AdminCredentials:
    """Credentials and TLS settings per Broker, read through the operator's API client
    and cached."""

    def __init__(self, api: KubeClient, timeout: float) -> None:
        self._api = api
        self._timeout = timeout
        # (namespace, broker name) -> ((Broker uid, the spec it was made for), how to call)
        self._cache: dict[tuple[str, str], tuple[tuple[str, Any], AdminAccess]] = {}

    async def access(self, broker: Mapping[str, Any]) -> AdminAccess:
        """How to call ``broker``'s admin service (the Broker object as stored).

        Raises AdminSecretMissing, saying what to do, when a Secret the call needs is
        missing or unreadable.
        """
        metadata = broker["metadata"]
        spec = BrokerSpec.from_manifest(broker.get("spec") or {})
        key = (metadata["namespace"], metadata["name"])
        made_for = (str(metadata.get("uid") or ""), (spec.auth, spec.tls))
        cached = self._cache.get(key)
        if cached is not None and cached[0] == made_for:
            return cached[1]
        credentials = await self._credentials(metadata) if spec.auth.enabled else None
        tls = await self._tls(metadata, spec) if spec.tls.mode == "enforcing" else PLAINTEXT
        access = AdminAccess(self._timeout, credentials, tls)
        self._cache[key] = (made_for, access)
        return access

    async def _credentials(self, metadata: Mapping[str, Any]) -> Credentials:
        name = admin_secret_name(metadata["name"])
        secret = await self._api.get("Secret", metadata["namespace"], name)
        if secret is None:
            raise AdminSecretMissing(
                f"Broker {metadata['name']!r} enforces authentication but its admin Secret "
                f"{name} does not exist yet; the operator creates it when it reconciles the "
                "Broker (see the Broker's status)"
            )
        try:
            return credentials_from_secret(secret)
        except (KeyError, ValueError) as exc:
            raise AdminSecretMissing(
                f"Secret {name} lacks the super user's keys ({exc}); delete it and restart "
                "the Broker's pods: the operator creates a new one"
            ) from None

    async def _tls(self, metadata: Mapping[str, Any], spec: BrokerSpec) -> ClientTls:
        name = mounted_tls_secret(spec, metadata["name"])
        secret = await self._api.get("Secret", metadata["namespace"], name)
        if secret is None:
            raise AdminSecretMissing(
                f"Broker {metadata['name']!r} refuses plaintext (tls.mode enforcing) but its "
                f"certificate's Secret {name} does not exist yet (see the Broker's status)"
            )
        encoded = (secret.get("data") or {}).get(TLS_CA_KEY)
        if not encoded:
            return ClientTls(enabled=True)
        return ClientTls(enabled=True, ca_pem=base64.b64decode(encoded), server_name=PEER_NAME)

    def note_failure(self, namespace: str, broker: str, error: BaseException) -> None:
        """A refused signature or connection may mean a Secret changed: read it again."""
        if isinstance(error, Unauthenticated | BrokerUnavailable):
            self._cache.pop((namespace, broker), None)

    def forget(self, namespace: str, broker: str) -> None:
        self._cache.pop((namespace, broker), None)
