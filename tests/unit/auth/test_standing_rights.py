"""Rights looked up again long after the request: ``gate.may`` for what the broker sends
on its own (a transaction check), with the user store as it is now."""

from __future__ import annotations

from pathlib import Path

from skiff_broker.auth.gate import may
from skiff_broker.auth.model import PolicyEntry, User, UserStatus
from skiff_broker.auth.rights import transaction_check_needs
from skiff_broker.auth.user_store import UserStore

PEER = "ipv4:10.0.0.7:51234"


def pub_on(topic: str, ips: tuple[str, ...] = ()) -> tuple[PolicyEntry, ...]:
    return (
        PolicyEntry.from_document(
            {"resources": [f"Topic:{topic}"], "actions": ["Pub"], "sourceIps": list(ips)}
        ),
    )


def store(tmp_path: Path) -> UserStore:
    users = UserStore(str(tmp_path / "auth.json"))
    users.load()
    users.apply_user(User("payer", "payer-secret"))
    users.apply_acl("payer", pub_on("txpay"))
    users.apply_user(User("nobody", "nobody-secret"))
    return users


def test_only_a_user_holding_pub_on_the_topic_may_be_asked(tmp_path: Path):
    users = store(tmp_path)
    needs = transaction_check_needs("txpay")
    assert may(users, "payer", needs, PEER)
    assert not may(users, "nobody", needs, PEER)
    assert not may(users, "payer", transaction_check_needs("other"), PEER)
    # No identity (a session opened while no gate ran) is nobody's.
    assert not may(users, "", needs, PEER)


def test_a_revoked_right_a_disabled_or_deleted_user_is_asked_no_more(tmp_path: Path):
    users = store(tmp_path)
    needs = transaction_check_needs("txpay")
    users.apply_acl("payer", ())
    assert not may(users, "payer", needs, PEER)
    users.apply_acl("payer", pub_on("txpay"))
    users.apply_user(User("payer", "payer-secret", status=UserStatus.DISABLED))
    assert not may(users, "payer", needs, PEER)
    users.delete_user("payer")
    assert not may(users, "payer", needs, PEER)


def test_source_addresses_are_those_of_the_sessions_stream(tmp_path: Path):
    users = store(tmp_path)
    users.apply_acl("payer", pub_on("txpay", ips=("10.0.0.0/24",)))
    needs = transaction_check_needs("txpay")
    assert may(users, "payer", needs, PEER)
    assert not may(users, "payer", needs, "ipv4:192.168.1.9:40000")
