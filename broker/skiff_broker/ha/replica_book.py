"""Where this master's replicas can be asked about their role: ``<data-dir>/replicas``.

A master outside Kubernetes writes down, for every replica that completes the
replication handshake, the client endpoint the replica reported, by replica
name (a replica that comes back at another address replaces its entry). The
file is replaced atomically, so a crash leaves the old or the new list, and it
is written only when an entry changes. A master that starts again asks these
peers whether one of them has since been promoted (:mod:`.successor_check`).
Entries are never dropped by the master: a peer that no longer answers costs a
failed call at start and nothing else.
"""

from __future__ import annotations

import json
import threading

from ..store.atomic_file import read_if_exists, write_atomically


class ReplicaBookError(Exception):
    """The replicas file is unreadable; the message says what to do."""


class ReplicaBook:
    def __init__(self, path: str) -> None:
        self.path = path
        self._endpoints: dict[str, str] = {}
        # Sessions of different replicas may remember at the same time (from threads).
        self._lock = threading.Lock()

    @property
    def endpoints(self) -> dict[str, str]:
        """Client endpoint by replica name."""
        with self._lock:
            return dict(self._endpoints)

    def load(self) -> None:
        raw = read_if_exists(self.path)
        if raw is None:
            self._endpoints = {}
            return
        try:
            document = json.loads(raw)
            replicas = document["replicas"] if isinstance(document, dict) else None
            if not isinstance(replicas, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in replicas.items()
            ):
                raise ValueError('expected {"replicas": {name: endpoint}}')
        except (ValueError, KeyError) as exc:
            raise ReplicaBookError(
                f"replicas file {self.path} is damaged ({exc}); delete it to start without "
                "asking former replicas whether one of them was promoted"
            ) from None
        self._endpoints = dict(replicas)

    def remember(self, name: str, endpoint: str) -> bool:
        """Record that replica ``name`` answers at ``endpoint``; True if the file changed."""
        with self._lock:
            if not endpoint or self._endpoints.get(name) == endpoint:
                return False
            updated = {**self._endpoints, name: endpoint}
            document = {"replicas": dict(sorted(updated.items()))}
            write_atomically(self.path, json.dumps(document, indent=1).encode())
            self._endpoints = updated
            return True
