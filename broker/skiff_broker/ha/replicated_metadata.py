"""The METADATA document: the state tables a master sends and its replicas take as theirs.

It holds the master's topics, consumer offsets, users with their ACLs, consumer groups'
settings (subscriptionGroup.json) and request modes (messageRequestMode.json), as compact
JSON with sorted keys, so one snapshot encodes to the same bytes every time and a master
sends it again only when it changed. A replica replaces its own tables with the
document's, keeping its bootstrap user, and writes them to its own files, so a promoted
or restarted replica has them. A document without "auth", "groups" or "requestModes"
(from a master older than that table's replication) leaves the replica's table as it
is. A document that does not parse changes none of the tables it did not reach and is
a FramingError (a bad frame).
"""

from __future__ import annotations

import json
import logging

from .framing import FramingError
from .replicated_broker import ReplicatedBroker

log = logging.getLogger(__name__)


def metadata_document(broker: ReplicatedBroker) -> bytes:
    """The document a master sends of ``broker``'s state tables now."""
    return json.dumps(
        {
            "topics": broker.topics.snapshot(),
            "offsets": broker.offsets.snapshot(),
            # Secrets included: encrypted only over TLS (--tls-ca), see replication.py.
            "auth": broker.users.snapshot(),
            "groups": broker.group_settings.snapshot(),
            "requestModes": broker.request_modes.snapshot(),
        },
        separators=(",", ":"),
        sort_keys=True,
    ).encode()


def apply_metadata(broker: ReplicatedBroker, document: dict, master: str) -> None:
    """Make ``document`` (from the master at ``master``) ``broker``'s state tables."""
    topics = document.get("topics")
    offsets = document.get("offsets")
    if not isinstance(topics, dict) or not isinstance(offsets, dict):
        raise FramingError("METADATA needs topics and offsets")
    try:
        broker.topics.replace_all(topics)
        broker.offsets.replace_all(offsets)
        # A master from before users were replicated sends none: keep this broker's.
        users = document.get("auth")
        if users is not None:
            if not isinstance(users, dict):
                raise TypeError("auth is not an object")
            if broker.users.replace_all(users, keep=broker.bootstrap_user):
                log.info("took the users and ACLs of master %s", master)
        # Older masters send neither: keep this broker's.
        groups = document.get("groups")
        if groups is not None:
            if not isinstance(groups, dict):
                raise TypeError("groups is not an object")
            if broker.group_settings.replace_all(groups):
                log.info("took the consumer groups' settings of master %s", master)
        modes = document.get("requestModes")
        if modes is not None:
            if not isinstance(modes, dict):
                raise TypeError("requestModes is not an object")
            if broker.request_modes.replace_all(modes):
                log.info("took the consumer groups' request modes of master %s", master)
    except (KeyError, TypeError, ValueError) as exc:
        raise FramingError(f"bad METADATA: {exc}") from None
