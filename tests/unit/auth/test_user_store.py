"""Users and ACLs on disk: applied idempotently, kept across a reopen, deleted together."""

from __future__ import annotations

import json

import pytest

from skiff_broker.auth.model import PolicyEntry, User, UserType
from skiff_broker.auth.user_store import UnknownUser, UserStore

ENTRY = PolicyEntry.from_document({"resources": ["Topic:orders"], "actions": ["Pub"]})


def signing_secret(store: UserStore, access_key: str) -> str | None:
    """The secret a signature by ``access_key`` is checked with; None if it is not admitted."""
    user = store.admitted(access_key)
    return None if user is None else user.secret_key


def opened(tmp_path) -> UserStore:
    store = UserStore(str(tmp_path / "auth.json"))
    store.load()
    return store


def test_applying_the_same_state_again_changes_and_writes_nothing(tmp_path):
    store = opened(tmp_path)
    assert store.apply_user(User("alice", "alice-secret"))
    assert store.apply_acl("alice", (ENTRY,))
    written = (tmp_path / "auth.json").stat().st_mtime_ns, (tmp_path / "auth.json").read_bytes()
    assert not store.apply_user(User("alice", "alice-secret"))
    assert not store.apply_acl("alice", (ENTRY,))
    after = (tmp_path / "auth.json").stat().st_mtime_ns, (tmp_path / "auth.json").read_bytes()
    assert after == written
    assert store.apply_user(User("alice", "new-secret", UserType.SUPER))


def test_users_and_acls_are_there_after_a_reopen(tmp_path):
    store = opened(tmp_path)
    store.apply_user(User("alice", "alice-secret"))
    store.apply_acl("alice", (ENTRY,))
    again = opened(tmp_path)
    assert again.user("alice") == User("alice", "alice-secret")
    assert again.acl("alice") == (ENTRY,)
    assert signing_secret(again, "nobody") is None


def test_deleting_a_user_deletes_its_acl_and_an_acl_needs_its_user(tmp_path):
    store = opened(tmp_path)
    store.apply_user(User("alice", "alice-secret"))
    store.apply_acl("alice", (ENTRY,))
    assert store.delete_user("alice") and not store.delete_user("alice")
    assert opened(tmp_path).acls() == {}
    with pytest.raises(UnknownUser):
        store.apply_acl("alice", (ENTRY,))


def test_a_damaged_file_falls_back_to_its_backup(tmp_path):
    store = opened(tmp_path)
    store.apply_user(User("alice", "alice-secret"))
    store.apply_user(User("bob", "bob-secret"))
    (tmp_path / "auth.json").write_text("{not json")
    # The .bak holds the version before the last write: alice only.
    assert [user.access_key for user in opened(tmp_path).users()] == ["alice"]


def test_a_replica_takes_its_masters_users_whole_and_keeps_its_bootstrap_user(tmp_path):
    master = UserStore(str(tmp_path / "master.json"))
    master.load()
    master.apply_user(User("alice", "alice-secret"))
    master.apply_acl("alice", (ENTRY,))
    replica = opened(tmp_path)
    root = User("root", "root-secret", UserType.SUPER)
    replica.apply_user(root)
    replica.apply_user(User("only-here", "gone-soon"))

    assert replica.replace_all(master.snapshot(), keep=root)
    assert [u.access_key for u in replica.users()] == ["alice", "root"]
    assert replica.acl("alice") == (ENTRY,)
    written = (tmp_path / "auth.json").read_bytes()
    assert not replica.replace_all(master.snapshot(), keep=root)
    assert (tmp_path / "auth.json").read_bytes() == written
    # Kept across a reopen: what was taken was written before it was used.
    assert opened(tmp_path).user("alice") == User("alice", "alice-secret")


def test_the_masters_bootstrap_user_wins_over_the_replicas_and_bad_documents_change_nothing(
    tmp_path,
):
    master = UserStore(str(tmp_path / "master.json"))
    master.load()
    master.apply_user(User("root", "masters-secret", UserType.SUPER))
    replica = opened(tmp_path)
    root = User("root", "root-secret", UserType.SUPER)
    replica.apply_user(root)
    assert replica.replace_all(master.snapshot(), keep=root)
    assert signing_secret(replica, "root") == "masters-secret"
    with pytest.raises((KeyError, TypeError, ValueError)):
        replica.replace_all({"users": {"x": {"username": "x", "password": "short"}}}, keep=root)
    assert signing_secret(replica, "root") == "masters-secret"


LEGACY = {
    "users": {
        "old": {"username": "old", "password": "old-secret", "userType": "Super"},
        "root": {"username": "root", "password": "root-secret", "userType": "Super"},
    },
    "acls": {},
}


def test_users_of_a_file_that_does_not_say_how_they_were_made_are_kept_but_not_admitted(
    tmp_path,
):
    (tmp_path / "auth.json").write_text(json.dumps(LEGACY))
    store = opened(tmp_path)
    assert store.unvetted() == ["old", "root"]
    assert store.user("old") == User("old", "old-secret", UserType.SUPER)
    assert signing_secret(store, "old") is None
    # Applying one as it is vouches for it (a change, written); the other stays refused.
    assert store.apply_user(User("old", "old-secret", UserType.SUPER))
    assert not store.apply_user(User("old", "old-secret", UserType.SUPER))
    again = opened(tmp_path)
    assert again.unvetted() == ["root"]
    assert signing_secret(again, "old") == "old-secret" and signing_secret(again, "root") is None
    assert again.delete_user("root") and opened(tmp_path).unvetted() == []


def test_a_replica_takes_the_masters_vetting_but_vouches_for_its_own_bootstrap_user(tmp_path):
    master = UserStore(str(tmp_path / "master.json"))
    (tmp_path / "master.json").write_text(json.dumps(LEGACY))
    master.load()
    replica = opened(tmp_path)
    root = User("root", "root-secret", UserType.SUPER)
    replica.apply_user(root)
    assert replica.replace_all(master.snapshot(), keep=root)
    assert replica.unvetted() == ["old"]
    assert (
        signing_secret(replica, "root") == "root-secret" and signing_secret(replica, "old") is None
    )
    # A legacy document from an older master: every user but the kept one unvetted.
    assert not replica.replace_all(LEGACY, keep=root)
