"""The pure part of User resources: spec parsing, the Secret's keys, rotation and expiry."""

from __future__ import annotations

import datetime

import pytest

from skiff_broker.client.admin import AclEntry
from skiff_operator.broker_endpoints import EndpointResolver
from skiff_operator.user_model import (
    Keys,
    UserSpec,
    credentials_secret,
    keys_patch,
    new_key_pair,
    retiring,
    rotated,
    without_previous,
)

NOW = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def stored(keys: Keys) -> dict:
    """The Secret as the API server would return it after create."""
    return credentials_secret("billing", "shop", "uid-1", keys)


def test_spec_becomes_the_user_and_acl_the_brokers_get() -> None:
    spec = UserSpec.from_manifest(
        {
            "brokerRef": {"name": "orders"},
            "acl": [
                {"resources": ["Topic:orders*"], "actions": ["Pub"]},
                {
                    "resources": ["Group:billing"],
                    "actions": ["Sub"],
                    "decision": "Deny",
                    "sourceIps": ["10.0.0.0/8"],
                },
            ],
        }
    )
    assert spec.broker == "orders"
    assert (spec.super_user, spec.enabled) == (False, True)
    assert spec.acl == (
        AclEntry(("Topic:orders*",), ("Pub",)),
        AclEntry(("Group:billing",), ("Sub",), "Deny", ("10.0.0.0/8",)),
    )


def test_an_acl_entry_without_actions_is_refused_with_its_number() -> None:
    with pytest.raises(ValueError, match="entry 1 needs resources and actions"):
        UserSpec.from_manifest({"brokerRef": {"name": "b"}, "acl": [{"resources": ["*"]}]})


def test_the_secret_round_trips_and_is_owned_by_the_user() -> None:
    keys = Keys(current=new_key_pair("billing"))
    secret = stored(keys)
    assert secret["metadata"]["name"] == "billing-credentials"
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("User", "uid-1", True)
    assert set(secret["data"]) == {"accessKey", "secretKey"}
    assert Keys.from_secret(secret) == keys
    assert keys.current.access_key.startswith("billing-")


def test_a_new_token_rotates_once_and_keeps_the_previous_pair_for_the_grace() -> None:
    first = Keys(current=new_key_pair("billing"))
    second = rotated(first, "t1", "billing", 600, NOW)
    assert second.previous == first.current
    assert second.current.access_key != first.current.access_key
    assert second.current.secret_key != first.current.secret_key
    assert second.previous_expires_at == NOW + datetime.timedelta(seconds=600)
    # Acting on the same token again changes nothing; no token rotates nothing.
    assert rotated(second, "t1", "billing", 600, NOW) == second
    assert rotated(first, "", "billing", 600, NOW) == first
    # The rotated Secret keeps both pairs and remembers the token.
    assert Keys.from_secret(stored(second)) == second


def test_the_previous_pair_expires_after_the_grace() -> None:
    keys = rotated(Keys(current=new_key_pair("billing")), "t1", "billing", 600, NOW)
    assert retiring(keys, "t1", NOW + datetime.timedelta(seconds=599)) is None
    assert retiring(keys, "t1", NOW + datetime.timedelta(seconds=600)) == keys.previous
    retired = without_previous(keys)
    assert retired.pairs() == (keys.current,)
    # The merge patch removes the previous pair and its expiry from the Secret.
    patch = keys_patch(retired)
    assert patch["data"]["previousAccessKey"] is None
    assert patch["metadata"]["annotations"]["skiff.io/previous-key-expires-at"] is None
    assert patch["metadata"]["annotations"]["skiff.io/rotated-for"] == "t1"


def test_a_rotation_during_a_grace_first_retires_the_previous_pair() -> None:
    second = rotated(Keys(current=new_key_pair("billing")), "t1", "billing", 600, NOW)
    # Never three valid pairs: the previous one must leave the brokers before t2 rotates.
    assert rotated(second, "t2", "billing", 600, NOW) == second
    assert retiring(second, "t2", NOW) == second.previous
    third = rotated(without_previous(second), "t2", "billing", 600, NOW)
    assert third.pairs() == (third.current, second.current)


def test_a_groups_master_pod_is_addressed_by_its_dns_name() -> None:
    resolver = EndpointResolver()
    assert (
        resolver.pod_endpoint("shop", "orders", 1, "orders-b-1")
        == "orders-b-1.orders-b-pods.shop.svc.cluster.local:8081"
    )
    # A custom template (an operator outside the cluster) is used for pods as well.
    assert EndpointResolver("{pod}.example:9").pod_endpoint("shop", "o", 0, "o-a-0") == (
        "o-a-0.example:9"
    )
