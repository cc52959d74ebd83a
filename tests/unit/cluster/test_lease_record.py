"""The group's Lease as brokers write and read it: annotations survive the round trip."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.cluster.lease_record import IN_SYNC, REMOTING_ENDPOINT, LeaseRecord

pods = st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=12)

records = st.builds(
    LeaseRecord,
    name=pods,
    cluster=pods,
    holder=st.one_of(st.just(""), pods),
    duration_s=st.integers(3, 300),
    epoch=st.integers(0, 2**31),
    endpoint=st.just("10.0.0.1:8081"),
    remoting_endpoint=st.sampled_from(["", "10.0.0.1:8080"]),
    ha_address=st.just("10.0.0.1:10912"),
    in_sync=st.lists(pods, max_size=4),
    replicas=st.dictionaries(pods, st.just("10.0.0.2:8081"), max_size=3),
    transitions=st.integers(0, 1000),
    released_by=st.one_of(st.just(""), pods),
    resource_version=st.just("42"),
    owners=st.lists(
        st.fixed_dictionaries({"kind": st.just("Broker"), "name": pods, "uid": pods}), max_size=1
    ),
)


@given(records)
def test_a_lease_reads_back_as_written(record: LeaseRecord) -> None:
    # Owners included: a broker's write must not take the Broker's ownership away.
    assert LeaseRecord.from_object(record.to_object()) == record


def test_a_lease_without_a_remoting_endpoint_carries_no_such_annotation() -> None:
    # Readers from before remoting routes see the Lease they knew.
    written = LeaseRecord("orders-a", "orders", holder="orders-a-0").to_object()
    assert REMOTING_ENDPOINT not in written["metadata"]["annotations"]
    with_port = LeaseRecord("orders-a", "orders", remoting_endpoint="10.0.0.1:8080")
    notes = with_port.to_object()["metadata"]["annotations"]
    assert notes[REMOTING_ENDPOINT] == "10.0.0.1:8080"


def test_only_a_pod_in_the_published_set_may_take_a_lease() -> None:
    lease = LeaseRecord(
        name="orders-a", cluster="orders", holder="orders-a-0", in_sync=["orders-a-0", "orders-a-1"]
    )
    assert lease.may_take("orders-a-1")
    assert not lease.may_take("orders-a-2")
    # A new Lease nobody published a set on: anyone may take it.
    assert LeaseRecord(name="orders-a", cluster="orders").may_take("orders-a-2")


def test_an_unreadable_in_sync_annotation_lets_nobody_take_the_lease() -> None:
    written = LeaseRecord(name="orders-a", cluster="orders", in_sync=["orders-a-0"]).to_object()
    written["metadata"]["annotations"][IN_SYNC] = "not json"
    assert not LeaseRecord.from_object(written).may_take("orders-a-0")
    written["metadata"]["annotations"][IN_SYNC] = json.dumps({"a": 1})
    assert not LeaseRecord.from_object(written).may_take("orders-a-0")
