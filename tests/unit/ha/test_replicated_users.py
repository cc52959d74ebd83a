"""A replica takes users and ACLs from its master's METADATA document (a real, unstarted broker).

A master's document replaces the replica's users, keeping the replica's bootstrap user; a
master from before users were replicated sends no "auth" and the replica keeps its own.
"""

from __future__ import annotations

import json

import pytest

from skiff_broker.auth.config import AuthConfig
from skiff_broker.auth.model import User, UserType
from skiff_broker.auth.user_store import UserStore
from skiff_broker.config import BrokerConfig
from skiff_broker.ha.framing import FramingError
from skiff_broker.ha.replicated_metadata import apply_metadata, metadata_document
from skiff_broker.runtime import Broker
from skiff_broker.store.config import StoreConfig

MASTER = "127.0.0.1:1"


@pytest.fixture
def replica(tmp_path):
    config = BrokerConfig(
        store=StoreConfig(data_dir=str(tmp_path / "replica")),
        auth=AuthConfig(init_user="keeper:keeper-secret"),
    )
    broker = Broker(config)
    for table in (broker.topics, broker.offsets, broker.users):
        table.load()
    broker.users.apply_user(User("local", "local-secret"))
    return broker


def masters_users(tmp_path) -> dict:
    master = UserStore(str(tmp_path / "master-auth.json"))
    master.load()
    master.apply_user(User("alice", "alice-secret", UserType.SUPER))
    return master.snapshot()


def test_the_masters_users_replace_the_replicas_own_but_its_bootstrap_user(replica, tmp_path):
    document = {"topics": {}, "offsets": {}, "auth": masters_users(tmp_path)}
    apply_metadata(replica, document, MASTER)
    assert [u.access_key for u in replica.users.users()] == ["alice", "keeper"]


def test_a_master_that_sends_no_users_leaves_the_replicas_alone(replica):
    apply_metadata(replica, {"topics": {}, "offsets": {}}, MASTER)
    assert replica.users.user("local") is not None


def test_users_that_do_not_parse_are_a_bad_frame_and_change_nothing(replica):
    with pytest.raises(FramingError, match="bad METADATA"):
        apply_metadata(replica, {"topics": {}, "offsets": {}, "auth": {"users": 7}}, MASTER)
    assert replica.users.user("local") is not None


def test_what_a_master_sends_a_replica_takes(replica, tmp_path):
    master = Broker(BrokerConfig(store=StoreConfig(data_dir=str(tmp_path / "master"))))
    for table in (master.topics, master.offsets, master.users):
        table.load()
    master.users.apply_user(User("alice", "alice-secret", UserType.SUPER))
    apply_metadata(replica, json.loads(metadata_document(master)), MASTER)
    assert [u.access_key for u in replica.users.users()] == ["alice", "keeper"]
