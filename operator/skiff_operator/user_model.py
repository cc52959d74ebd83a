"""A User resource as the brokers and its credentials Secret must hold it (pure, no I/O).

Brokers keep one secret key per access key, so a rotation mints a whole new key pair
(a new access key too) and keeps the previous pair valid for a grace period: clients
switch at their own pace, then the previous user is removed from the brokers.

Invariants: the Secret is the one record of which keys exist (``accessKey``/``secretKey``
and, during a grace period, ``previousAccessKey``/``previousSecretKey`` with the expiry in
an annotation); a rotation token is acted on once (the Secret remembers the last one);
the previous pair only leaves the Secret after it has left every group's master.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import secrets
from collections.abc import Mapping
from typing import Any

from skiff_broker.client.admin import AclEntry

from . import GROUP, VERSION
from .naming import MANAGED_BY

ROTATE_ANNOTATION = "skiff.io/rotate"
# On the Secret: the last rotation token acted on, and when the previous pair expires.
ROTATED_ANNOTATION = "skiff.io/rotated-for"
PREVIOUS_EXPIRES_ANNOTATION = "skiff.io/previous-key-expires-at"
LABEL_USER = "skiff.io/user"

ACCESS_KEY = "accessKey"
SECRET_KEY = "secretKey"
PREVIOUS_ACCESS_KEY = "previousAccessKey"
PREVIOUS_SECRET_KEY = "previousSecretKey"

DEFAULT_GRACE_SECONDS = 3600
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def credentials_secret_name(user: str) -> str:
    return f"{user}-credentials"


@dataclasses.dataclass(frozen=True, slots=True)
class KeyPair:
    access_key: str
    secret_key: str = dataclasses.field(repr=False)


def new_key_pair(user: str) -> KeyPair:
    """A fresh pair; the access key names the User so broker logs say whose it is."""
    return KeyPair(f"{user}-{secrets.token_hex(4)}", secrets.token_urlsafe(32))


@dataclasses.dataclass(frozen=True, slots=True)
class UserSpec:
    broker: str
    super_user: bool
    enabled: bool
    acl: tuple[AclEntry, ...]
    grace_seconds: int

    @classmethod
    def from_manifest(cls, spec: Mapping[str, Any]) -> UserSpec:
        """ValueError (saying what to fix) for an entry the brokers would refuse."""
        entries = []
        for number, entry in enumerate(spec.get("acl") or (), start=1):
            acl_entry = AclEntry(
                resources=tuple(entry.get("resources") or ()),
                actions=tuple(entry.get("actions") or ()),
                decision=entry.get("decision") or "Allow",
                source_ips=tuple(entry.get("sourceIps") or ()),
            )
            if not acl_entry.resources or not acl_entry.actions:
                raise ValueError(f"spec.acl entry {number} needs resources and actions")
            entries.append(acl_entry)
        return cls(
            broker=spec["brokerRef"]["name"],
            super_user=bool(spec.get("super", False)),
            enabled=not spec.get("disabled", False),
            acl=tuple(entries),
            grace_seconds=int(spec.get("rotationGraceSeconds", DEFAULT_GRACE_SECONDS)),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Keys:
    """What the Secret holds: the current pair and, during a grace period, the previous."""

    current: KeyPair
    previous: KeyPair | None = None
    previous_expires_at: datetime.datetime | None = None
    rotated_for: str = ""

    @classmethod
    def from_secret(cls, secret: Mapping[str, Any]) -> Keys:
        data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
        annotations = (secret.get("metadata") or {}).get("annotations") or {}
        previous = None
        if data.get(PREVIOUS_ACCESS_KEY):
            previous = KeyPair(data[PREVIOUS_ACCESS_KEY], data.get(PREVIOUS_SECRET_KEY, ""))
        expires = annotations.get(PREVIOUS_EXPIRES_ANNOTATION)
        return cls(
            current=KeyPair(data[ACCESS_KEY], data[SECRET_KEY]),
            previous=previous,
            previous_expires_at=_parse_time(expires) if expires and previous else None,
            rotated_for=annotations.get(ROTATED_ANNOTATION, ""),
        )

    def data(self) -> dict[str, str]:
        """The Secret's ``data``; a retired previous pair is removed (None in a merge patch)."""
        previous = self.previous
        return {
            ACCESS_KEY: _b64(self.current.access_key),
            SECRET_KEY: _b64(self.current.secret_key),
            PREVIOUS_ACCESS_KEY: _b64(previous.access_key) if previous else None,  # type: ignore[dict-item]
            PREVIOUS_SECRET_KEY: _b64(previous.secret_key) if previous else None,  # type: ignore[dict-item]
        }

    def annotations(self) -> dict[str, str | None]:
        expires = self.previous_expires_at
        return {
            ROTATED_ANNOTATION: self.rotated_for or None,
            PREVIOUS_EXPIRES_ANNOTATION: expires.strftime(_TIME_FORMAT) if expires else None,
        }

    def pairs(self) -> tuple[KeyPair, ...]:
        return (self.current, self.previous) if self.previous else (self.current,)


def rotation_pending(keys: Keys, token: str) -> bool:
    return bool(token) and token != keys.rotated_for


def rotated(keys: Keys, token: str, user: str, grace_seconds: int, now: datetime.datetime) -> Keys:
    """``keys`` after acting on rotation ``token`` (unchanged if none is pending).

    Only two pairs are ever valid: while a previous pair is still held, nothing rotates
    (``retiring`` names that pair, so it leaves the brokers first).
    """
    if not rotation_pending(keys, token) or keys.previous is not None:
        return keys
    return Keys(
        current=new_key_pair(user),
        previous=keys.current,
        previous_expires_at=now + datetime.timedelta(seconds=grace_seconds),
        rotated_for=token,
    )


def retiring(keys: Keys, token: str, now: datetime.datetime) -> KeyPair | None:
    """The previous pair once it must leave the brokers: its grace is over, or a new
    rotation is asked for (which ends the grace early)."""
    if keys.previous is None:
        return None
    expires = keys.previous_expires_at
    if rotation_pending(keys, token) or expires is None or expires <= now:
        return keys.previous
    return None


def without_previous(keys: Keys) -> Keys:
    return dataclasses.replace(keys, previous=None, previous_expires_at=None)


def credentials_secret(user: str, namespace: str, uid: str, keys: Keys) -> dict[str, Any]:
    """The Secret created once for a User, owned by it (garbage-collected with it)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": credentials_secret_name(user),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/managed-by": MANAGED_BY,
                LABEL_USER: user,
            },
            "annotations": {k: v for k, v in keys.annotations().items() if v is not None},
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "User",
                    "name": user,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": {k: v for k, v in keys.data().items() if v is not None},
    }


def keys_patch(keys: Keys) -> dict[str, Any]:
    """A merge patch bringing an existing Secret to ``keys`` (None removes a field)."""
    return {"metadata": {"annotations": keys.annotations()}, "data": keys.data()}


def format_time(moment: datetime.datetime) -> str:
    return moment.strftime(_TIME_FORMAT)


def _parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=datetime.UTC)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
