"""Users and their ACL policies, in RocketMQ ACL 2.0's shape.

A resource is written as ACL 2.0 writes it: ``Cluster``, ``Topic:<name>``,
``Group:<name>``, a prefix pattern ``Topic:orders*``, ``Topic:*`` or ``*`` (anything).
Invariants: every value here is immutable; ``from_document(to_document(x)) == x``;
parsing rejects what RocketMQ would reject with a ValueError saying what is wrong.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
from typing import Any


class UserType(enum.StrEnum):
    SUPER = "Super"
    NORMAL = "Normal"


class UserStatus(enum.StrEnum):
    ENABLED = "enable"
    DISABLED = "disable"


class Action(enum.StrEnum):
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"
    ALL = "All"


class Decision(enum.StrEnum):
    ALLOW = "Allow"
    DENY = "Deny"


class ResourceType(enum.StrEnum):
    CLUSTER = "Cluster"
    TOPIC = "Topic"
    GROUP = "Group"
    ANY = "*"


def _named(enum_type: type[enum.StrEnum], value: str, what: str) -> Any:
    for member in enum_type:
        if member.value.lower() == value.strip().lower():
            return member
    names = ", ".join(member.value for member in enum_type)
    raise ValueError(f"unknown {what} {value[:40]!r}; use one of {names}")


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    """``type`` and ``name``; a name ending in ``*`` is a prefix, ``*`` alone any name."""

    type: ResourceType
    name: str = ""

    @classmethod
    def parse(cls, text: str) -> Resource:
        text = text.strip()
        if text == "*":
            return cls(ResourceType.ANY, "*")
        if text.lower() == "cluster" or text.lower().startswith("cluster:"):
            return cls(ResourceType.CLUSTER, "")
        kind, colon, name = text.partition(":")
        if not colon or not name:
            raise ValueError(
                f"resource {text[:60]!r} is not Cluster, Topic:<name>, Group:<name> or *"
            )
        resource_type = _named(ResourceType, kind, "resource type")
        if resource_type not in (ResourceType.TOPIC, ResourceType.GROUP):
            raise ValueError(f"resource {text[:60]!r}: only Topic and Group take a name")
        if "*" in name[:-1]:
            raise ValueError(f"resource {text[:60]!r}: '*' may only end a name (a prefix)")
        return cls(resource_type, name)

    def __str__(self) -> str:
        if self.type is ResourceType.ANY:
            return "*"
        if self.type is ResourceType.CLUSTER:
            return "Cluster"
        return f"{self.type.value}:{self.name}"

    def covers(self, other: Resource) -> bool:
        """Whether this (possibly a pattern) names the concrete resource ``other``."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is not other.type:
            return False
        if self.type is ResourceType.CLUSTER:
            return True
        if self.name.endswith("*"):
            return other.name.startswith(self.name[:-1])
        return self.name == other.name


@dataclasses.dataclass(frozen=True, slots=True)
class PolicyEntry:
    """Allow or deny ``actions`` on ``resources``, from ``source_ips`` (empty: anywhere)."""

    resources: tuple[Resource, ...]
    actions: frozenset[Action]
    decision: Decision = Decision.ALLOW
    source_ips: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.resources:
            raise ValueError("a policy entry needs at least one resource")
        if not self.actions:
            raise ValueError("a policy entry needs at least one action")
        for source in self.source_ips:
            try:
                ipaddress.ip_network(source, strict=False)
            except ValueError:
                raise ValueError(
                    f"source IP {source[:60]!r} is neither an address nor a CIDR block"
                ) from None

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> PolicyEntry:
        return cls(
            resources=tuple(Resource.parse(text) for text in document["resources"]),
            actions=frozenset(_named(Action, text, "action") for text in document["actions"]),
            decision=_named(Decision, document.get("decision", "Allow"), "decision"),
            source_ips=tuple(str(ip) for ip in document.get("sourceIps", ())),
        )

    def to_document(self) -> dict[str, Any]:
        return {
            "resources": [str(resource) for resource in self.resources],
            "actions": sorted(action.value for action in self.actions),
            "decision": self.decision.value,
            "sourceIps": list(self.source_ips),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class User:
    access_key: str
    secret_key: str
    type: UserType = UserType.NORMAL
    status: UserStatus = UserStatus.ENABLED

    def __post_init__(self) -> None:
        if not self.access_key or any(c in self.access_key for c in " ,=/:\t\n"):
            raise ValueError(
                f"access key {self.access_key[:40]!r} must be non-empty without spaces, "
                "commas, '=', '/' or ':'"
            )
        if len(self.secret_key) < 6:
            raise ValueError("a secret key must have at least 6 characters")

    @property
    def enabled(self) -> bool:
        return self.status is UserStatus.ENABLED

    @property
    def is_super(self) -> bool:
        return self.type is UserType.SUPER

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> User:
        return cls(
            access_key=document["username"],
            secret_key=document["password"],
            type=_named(UserType, document.get("userType", "Normal"), "user type"),
            status=_named(UserStatus, document.get("userStatus", "enable"), "user status"),
        )

    def to_document(self) -> dict[str, Any]:
        # RocketMQ's names for the fields (ACL 2.0 keeps the access key as "username").
        return {
            "username": self.access_key,
            "password": self.secret_key,
            "userType": self.type.value,
            "userStatus": self.status.value,
        }


def parse_user_spec(text: str) -> User:
    """A super user from ``ACCESS_KEY:SECRET_KEY`` (the bootstrap option's form)."""
    access_key, colon, secret_key = text.partition(":")
    if not colon:
        raise ValueError("expected ACCESS_KEY:SECRET_KEY")
    return User(access_key, secret_key, UserType.SUPER)
