"""ACL 2.0 decisions: super users, Deny over Allow, patterns, source IPs."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.auth.decision import SUPER_ONLY, decide, need
from skiff_broker.auth.model import (
    Action,
    Decision,
    PolicyEntry,
    Resource,
    ResourceType,
    User,
    UserStatus,
    UserType,
)

ALICE = User("alice", "alice-secret")
ROOT = User("root", "root-secret", UserType.SUPER)
PUB_ORDERS = need(ResourceType.TOPIC, "orders", Action.PUB)
SUB_ORDERS = need(ResourceType.TOPIC, "orders", Action.SUB)
SUB_GROUP = need(ResourceType.GROUP, "billing", Action.SUB)


def entry(*resources: str, actions=("Pub",), decision="Allow", ips=()) -> PolicyEntry:
    return PolicyEntry.from_document(
        {"resources": resources, "actions": actions, "decision": decision, "sourceIps": ips}
    )


def test_nothing_is_allowed_without_a_policy():
    refusal = decide(ALICE, [], [PUB_ORDERS], "10.0.0.1")
    assert refusal is not None and "Pub on Topic:orders" in refusal.reason


def test_a_super_user_may_do_anything_and_a_normal_user_not_super_only_things():
    assert decide(ROOT, [], [PUB_ORDERS, *SUPER_ONLY], "10.0.0.1") is None
    assert decide(ALICE, [entry("*", actions=("All",))], SUPER_ONLY, "10.0.0.1") is not None


def test_a_disabled_user_may_do_nothing_even_as_super():
    disabled = User("root", "root-secret", UserType.SUPER, UserStatus.DISABLED)
    assert "disabled" in decide(disabled, [], [PUB_ORDERS], "10.0.0.1").reason


@pytest.mark.parametrize(
    "resource, allowed",
    [
        ("Topic:orders", True),
        ("Topic:ord*", True),
        ("Topic:*", True),
        ("*", True),
        ("Topic:order", False),
        ("Topic:orders-eu*", False),
        ("Group:orders", False),
        ("Cluster", False),
    ],
)
def test_resource_patterns(resource, allowed):
    assert (decide(ALICE, [entry(resource)], [PUB_ORDERS], "10.0.0.1") is None) is allowed


def test_deny_wins_over_allow_whatever_the_order():
    allow = entry("Topic:*", actions=("All",))
    deny = entry("Topic:orders", actions=("Pub",), decision="Deny")
    assert decide(ALICE, [allow, deny], [PUB_ORDERS], "10.0.0.1") is not None
    assert decide(ALICE, [deny, allow], [PUB_ORDERS], "10.0.0.1") is not None
    assert decide(ALICE, [allow, deny], [SUB_ORDERS], "10.0.0.1") is None


def test_every_need_must_be_met_topic_and_group():
    topic_only = entry("Topic:orders", actions=("Sub",))
    assert "Group:billing" in decide(ALICE, [topic_only], [SUB_ORDERS, SUB_GROUP], "1.2.3.4").reason
    both = entry("Topic:orders", "Group:billing", actions=("Sub",))
    assert decide(ALICE, [both], [SUB_ORDERS, SUB_GROUP], "1.2.3.4") is None


def test_any_one_of_the_accepted_actions_suffices():
    route = need(ResourceType.TOPIC, "orders", Action.PUB, Action.SUB)
    assert decide(ALICE, [entry("Topic:orders", actions=("Sub",))], [route], "1.2.3.4") is None


@pytest.mark.parametrize(
    "caller, allowed",
    [("10.1.2.3", True), ("10.2.0.1", False), ("192.168.0.7", True), ("::1", False), ("", False)],
)
def test_source_ips_limit_where_an_entry_applies(caller, allowed):
    policy = entry("Topic:orders", ips=("10.1.0.0/16", "192.168.0.7"))
    assert (decide(ALICE, [policy], [PUB_ORDERS], caller) is None) is allowed


def test_documents_round_trip():
    policy = entry("Topic:ord*", "Group:g", "Cluster", "*", actions=("Pub", "Sub"), ips=("::1",))
    assert PolicyEntry.from_document(policy.to_document()) == policy
    assert User.from_document(ROOT.to_document()) == ROOT


@pytest.mark.parametrize(
    "document, complaint",
    [
        ({"resources": ["Queue:x"], "actions": ["Pub"]}, "resource type"),
        ({"resources": ["Topic:a*b"], "actions": ["Pub"]}, "prefix"),
        ({"resources": ["Topic:a"], "actions": ["Fly"]}, "action"),
        ({"resources": ["Topic:a"], "actions": ["Pub"], "sourceIps": ["nowhere"]}, "CIDR"),
        ({"resources": [], "actions": ["Pub"]}, "resource"),
    ],
)
def test_bad_policies_are_refused_saying_why(document, complaint):
    with pytest.raises(ValueError, match=complaint):
        PolicyEntry.from_document(document)


names = st.text(alphabet="abcdeo*", min_size=1, max_size=6).filter(lambda n: "*" not in n[:-1])


@given(
    resources=st.lists(names.map(lambda n: f"Topic:{n}"), min_size=1, max_size=3),
    decisions=st.lists(st.sampled_from(["Allow", "Deny"]), min_size=1, max_size=3),
    topic=st.text(alphabet="abcdeo", min_size=1, max_size=6),
)
def test_decide_is_pure_and_deny_anywhere_refuses(resources, decisions, topic):
    policies = [entry(r, decision=d) for r, d in zip(resources, decisions, strict=False)]
    kept = copy.deepcopy(policies)
    wanted = [need(ResourceType.TOPIC, topic, Action.PUB)]
    first = decide(ALICE, policies, wanted, "10.0.0.1")
    assert first == decide(ALICE, policies, wanted, "10.0.0.1")
    assert policies == kept
    applying = [p for p in policies if any(r.covers(wanted[0].resource) for r in p.resources)]
    expected_allowed = bool(applying) and all(p.decision is Decision.ALLOW for p in applying)
    assert (first is None) is expected_allowed


def test_a_resource_covers_only_its_own_type():
    assert not Resource.parse("Topic:*").covers(Resource(ResourceType.GROUP, "x"))
    assert Resource.parse("cluster") == Resource(ResourceType.CLUSTER, "")
