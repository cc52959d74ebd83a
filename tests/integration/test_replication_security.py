"""Users, ACLs and the replication stream between real broker processes.

A user applied on a master signs requests on its replica a moment later and
after the replica is promoted; the replica refuses user changes and says where
to apply them, and keeps its own bootstrap user.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker_process import BrokerProcess, killed_afterwards, start_broker, wait_for

from skiff_broker.client.admin import AclEntry, AdminClient
from skiff_broker.client.credentials import Credentials
from skiff_broker.client.errors import FailedPrecondition, SkiffError

HEARTBEATS = ("--ha-heartbeat-interval", "0.5", "--ha-heartbeat-timeout", "5")
ROOT = Credentials("root", "root-secret")
KEEPER = Credentials("keeper", "keeper-secret")  # only the replica's bootstrap user
ALICE = Credentials("alice", "alice-secret")
ALICE_ACL = [AclEntry(("Topic:orders",), ("Pub", "Sub"))]


@pytest.fixture
def started() -> Iterator[list[BrokerProcess]]:
    with killed_afterwards() as brokers:
        yield brokers


def auth_env(user: Credentials) -> dict[str, str]:
    return {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": f"{user.access_key}:{user.secret_key}"}


def signs_in(broker: BrokerProcess, user: Credentials) -> bool:
    """Whether a request signed by ``user`` is served (admin calls need a super user)."""
    try:
        with AdminClient(broker.endpoint, credentials=user, timeout=10) as admin:
            admin.broker_info()
    except SkiffError:
        return False
    return True


def test_users_reach_the_replica_and_stay_after_promotion(
    tmp_path: Path, started: list[BrokerProcess]
) -> None:
    (tmp_path / "master").mkdir()
    (tmp_path / "replica").mkdir()
    master = start_broker(tmp_path / "master", "--role", "MASTER", *HEARTBEATS, env=auth_env(ROOT))
    started.append(master)
    replica = start_broker(
        tmp_path / "replica",
        *("--role", "REPLICA", "--master-address", master.ha_endpoint, *HEARTBEATS),
        env=auth_env(KEEPER),
    )
    started.append(replica)
    with AdminClient(master.endpoint, credentials=ROOT) as admin:
        admin.apply_user(ALICE.access_key, ALICE.secret_key, super_user=True)
        admin.apply_acl(ALICE.access_key, ALICE_ACL)

    wait_for("alice to sign in on the replica", lambda: signs_in(replica, ALICE))
    assert signs_in(replica, KEEPER), "the replica lost its own bootstrap user"
    with AdminClient(replica.endpoint, credentials=ALICE) as admin:
        assert admin.get_acl(ALICE.access_key) == ALICE_ACL
        with pytest.raises(FailedPrecondition, match="apply them on the master") as refused:
            admin.apply_user("mallory", "mallory-secret")
        assert master.ha_endpoint in str(refused.value)
        with pytest.raises(FailedPrecondition, match="apply them on the master"):
            admin.delete_user(ALICE.access_key)
        assert {u.access_key for u in admin.list_users()} == {"alice", "keeper", "root"}

    # A change on the master replaces the replica's copy.
    with AdminClient(master.endpoint, credentials=ROOT) as admin:
        admin.delete_user(ALICE.access_key)
    wait_for("alice to be gone from the replica", lambda: not signs_in(replica, ALICE))
    with AdminClient(master.endpoint, credentials=ROOT) as admin:
        admin.apply_user(ALICE.access_key, ALICE.secret_key, super_user=True)
    wait_for("alice back on the replica", lambda: signs_in(replica, ALICE))

    master.kill()
    with AdminClient(replica.endpoint, credentials=KEEPER) as admin:
        admin.promote()
    for user in (ROOT, ALICE, KEEPER):
        assert signs_in(replica, user), f"{user.access_key} is gone after the promotion"
    with AdminClient(replica.endpoint, credentials=ALICE) as admin:
        assert admin.apply_user("bob", "bob-secret")
