"""Whether a user may do what a request needs: ACL 2.0's decision, as a pure function.

A request needs one or more ``Need``s (a concrete resource and the actions of
which any one suffices). Rules, in order:

* a disabled user may do nothing; a super user may do anything else;
* ``needs`` that are ``SUPER_ONLY`` are for super users alone;
* otherwise every need must be met. An entry applies to a need when one of its
  resources covers the need's resource, its actions include one the need
  accepts (``All`` includes every action), and its source IPs (if any) include
  the caller's address. Deny wins over Allow; where no entry applies, the answer
  is deny (nothing is allowed by default).

Invariant: ``decide`` reads only its arguments and returns the same answer for
the same arguments.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Sequence

from .model import Action, Decision, PolicyEntry, Resource, ResourceType, User


@dataclasses.dataclass(frozen=True, slots=True)
class Need:
    resource: Resource
    # Any one of these suffices (QueryRoute accepts Pub or Sub, as RocketMQ does).
    actions: frozenset[Action]

    def __str__(self) -> str:
        actions = " or ".join(sorted(action.value for action in self.actions))
        return f"{actions} on {self.resource}"


def need(resource_type: ResourceType, name: str, *actions: Action) -> Need:
    return Need(Resource(resource_type, name), frozenset(actions))


SUPER_ONLY: tuple[Need, ...] = (need(ResourceType.CLUSTER, "", Action.ALL),)


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused, in a sentence for the user."""

    reason: str


def _from(source_ips: Sequence[str], caller_ip: str) -> bool:
    if not source_ips:
        return True
    try:
        address = ipaddress.ip_address(caller_ip)
    except ValueError:
        return False
    for source in source_ips:
        network = ipaddress.ip_network(source, strict=False)
        if address.version == network.version and address in network:
            return True
    return False


def _applies(entry: PolicyEntry, wanted: Need, caller_ip: str) -> bool:
    if not any(resource.covers(wanted.resource) for resource in entry.resources):
        return False
    if Action.ALL not in entry.actions and not (entry.actions & wanted.actions):
        return False
    return _from(entry.source_ips, caller_ip)


def decide(
    user: User, policies: Iterable[PolicyEntry], needs: Sequence[Need], caller_ip: str
) -> Refusal | None:
    """None when ``user`` may do what ``needs`` say from ``caller_ip``; else why not."""
    if not user.enabled:
        return Refusal(f"user {user.access_key!r} is disabled; ask an administrator to enable it")
    if user.is_super:
        return None
    if tuple(needs) == SUPER_ONLY:
        return Refusal(f"only a super user may do this; {user.access_key!r} is a normal user")
    entries = tuple(policies)
    for wanted in needs:
        applying = [entry for entry in entries if _applies(entry, wanted, caller_ip)]
        if any(entry.decision is Decision.DENY for entry in applying):
            return Refusal(f"user {user.access_key!r} is denied {wanted} (a Deny policy)")
        if not applying:
            return Refusal(
                f"user {user.access_key!r} has no ACL allowing {wanted} from {caller_ip}; "
                "grant it with `skiff admin acl apply`"
            )
    return None
