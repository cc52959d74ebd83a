"""The broker's users and their ACLs, kept in ``config/auth.json``.

Invariants: every change is written (atomically, with a ``.bak``, by StateFile)
before it is answered; applying a user or an ACL that is already as given
changes nothing and writes nothing, so an operator can apply its desired state
again and again; deleting a user deletes its ACL; deleting what does not exist
answers False. A replica takes its master's users and ACLs whole (``replace_all``),
written only when they differ, keeping its own bootstrap user if the master lacks
it so that it can always be signed into. Secrets are kept as given (the signature
check needs them), so the data directory is as sensitive as the secrets themselves.

Vetting: every user written here is vetted (applied through a signed admin call
with authentication on, the bootstrap user of ``--auth-init-user``, or an offline
``skiff store user`` edit of a stopped directory), except users of a file written
before Skiff recorded how users were made (no ``format`` field): nothing says
those were not planted by an unsigned call while authentication was off, so they
are kept but unvetted, and ``admitted`` knows none of them (a signature
by one never verifies) until they are applied again through a vetted path.
"""

from __future__ import annotations

import threading
from typing import Any

from ..metadata.state_file import StateFile
from .model import PolicyEntry, User

# auth.json's ``format``: 2 records which users are vetted; a file without one predates it.
FORMAT = 2


class UnknownUser(KeyError):
    """An ACL was given for a user that does not exist."""


class UserStore:
    def __init__(self, path: str) -> None:
        self._file = StateFile(path, lost="every user and ACL")
        self._lock = threading.Lock()
        self._users: dict[str, User] = {}
        self._acls: dict[str, tuple[PolicyEntry, ...]] = {}
        # Users kept but not admitted: their origin is unknown (see the module docstring).
        self._unvetted: set[str] = set()

    def load(self, *, discard_damaged: bool = False) -> None:
        loaded = self._file.read(_parse, discard_damaged=discard_damaged)
        with self._lock:
            self._users, self._acls, self._unvetted = (
                loaded if loaded is not None else ({}, {}, set())
            )

    def _save(self) -> None:
        self._file.write(self._document())

    def _document(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "unvetted": sorted(self._unvetted),
            "users": {key: user.to_document() for key, user in sorted(self._users.items())},
            "acls": {
                key: [entry.to_document() for entry in entries]
                for key, entries in sorted(self._acls.items())
            },
        }

    # -- replication ----------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Every user (with its secret) and ACL as auth.json holds them: what a master sends."""
        with self._lock:
            return self._document()

    def replace_all(self, document: dict[str, Any], *, keep: User | None = None) -> bool:
        """Take a master's users and ACLs in place of this store's; whether anything changed.

        ``keep``: a user kept if the master has none by its access key (the bootstrap
        user), and vetted if the master holds it as given. The master's vetting is taken
        with its users. Written (crash-safely) only when the result differs from what is
        held; a document that does not parse raises KeyError, TypeError or ValueError
        and changes nothing.
        """
        try:
            users, acls, unvetted = _parse(document)
        except AttributeError:
            raise ValueError("users and ACLs are not shaped as auth.json holds them") from None
        if keep is not None and users.setdefault(keep.access_key, keep) == keep:
            unvetted.discard(keep.access_key)
        with self._lock:
            if (users, acls, unvetted) == (self._users, self._acls, self._unvetted):
                return False
            self._users, self._acls, self._unvetted = users, acls, unvetted
            self._save()
            return True

    # -- users ----------------------------------------------------------------

    def user(self, access_key: str) -> User | None:
        return self._users.get(access_key)

    def users(self) -> list[User]:
        return sorted(self._users.values(), key=lambda user: user.access_key)

    def unvetted(self) -> list[str]:
        """Access keys of users kept but not admitted (made by no vetted path, see above)."""
        return sorted(self._unvetted)

    def admitted(self, access_key: str) -> User | None:
        """The user, if it may sign calls now: known, enabled and vetted; else None."""
        user = self._users.get(access_key)
        if user is None or not user.enabled or access_key in self._unvetted:
            return None
        return user

    def apply_user(self, user: User) -> bool:
        """Create or replace the user, vetted; whether anything changed.

        Only vetted paths call this: the admin service refuses it while authentication
        is off. Applying an unvetted user as it is vets it, which is a change.
        """
        with self._lock:
            if self._users.get(user.access_key) == user and user.access_key not in self._unvetted:
                return False
            self._users[user.access_key] = user
            self._unvetted.discard(user.access_key)
            self._save()
            return True

    def delete_user(self, access_key: str) -> bool:
        with self._lock:
            if access_key not in self._users:
                return False
            del self._users[access_key]
            self._acls.pop(access_key, None)
            self._unvetted.discard(access_key)
            self._save()
            return True

    # -- ACLs -----------------------------------------------------------------

    def acl(self, access_key: str) -> tuple[PolicyEntry, ...]:
        return self._acls.get(access_key, ())

    def acls(self) -> dict[str, tuple[PolicyEntry, ...]]:
        return dict(sorted(self._acls.items()))

    def apply_acl(self, access_key: str, entries: tuple[PolicyEntry, ...]) -> bool:
        """Make ``entries`` the user's whole ACL; whether anything changed."""
        with self._lock:
            if access_key not in self._users:
                raise UnknownUser(access_key)
            if self._acls.get(access_key, ()) == entries:
                return False
            if entries:
                self._acls[access_key] = entries
            else:
                self._acls.pop(access_key, None)
            self._save()
            return True

    def delete_acl(self, access_key: str) -> bool:
        with self._lock:
            if access_key not in self._acls:
                return False
            del self._acls[access_key]
            self._save()
            return True


def _parse(
    document: dict[str, Any],
) -> tuple[dict[str, User], dict[str, tuple[PolicyEntry, ...]], set[str]]:
    users = {key: User.from_document(value) for key, value in document["users"].items()}
    acls = {
        key: tuple(PolicyEntry.from_document(entry) for entry in entries)
        for key, entries in document.get("acls", {}).items()
    }
    if "format" not in document:
        # Written before vetting was recorded: any of them may have been planted unsigned.
        return users, acls, set(users)
    unvetted = {str(key) for key in document.get("unvetted", [])} & set(users)
    return users, acls, unvetted
