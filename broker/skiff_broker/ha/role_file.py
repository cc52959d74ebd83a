"""A promotion outlives a restart: ``<data-dir>/role`` records that this broker is master.

Written atomically when a replica is promoted by hand (outside Kubernetes,
where no Lease remembers it). A broker started with ``--role REPLICA`` whose
role file says MASTER stays the master: following its old master again would
cut the writes it acknowledged since. Making it a replica again is a
deliberate step: delete the file (see the replication walkthrough, docs/replication.md).
"""

from __future__ import annotations

import json

from ..store.atomic_file import read_if_exists, write_atomically


class RoleFileError(Exception):
    """The role file is unreadable; the message says what to do."""


def read_promoted(path: str) -> dict | None:
    """``{"role": "MASTER", "ha_listen": ..., "epoch": ...}`` if this broker was promoted."""
    raw = read_if_exists(path)
    if raw is None:
        return None
    try:
        document = json.loads(raw)
        if not isinstance(document, dict) or document.get("role") != "MASTER":
            raise ValueError("no MASTER role recorded")
    except ValueError as exc:
        raise RoleFileError(
            f"role file {path} is damaged ({exc}); delete it to start with the role the "
            "command line gives"
        ) from None
    return document


def write_promoted(path: str, *, ha_listen: str, epoch: int) -> None:
    document = {"role": "MASTER", "ha_listen": ha_listen, "epoch": epoch}
    write_atomically(path, json.dumps(document).encode())
