"""Failover decided by the group's Lease, with real brokers, real Leases and RBAC.

A group's master is the holder of its Lease. SIGKILL the master under SYNC load
from the official client: an in-sync replica takes the Lease within a Lease
duration, producers go on after asking for the route again, and no acknowledged
message is lost; the old master comes back as a replica and copies the new
term. A master frozen with SIGSTOP stops acknowledging before its Lease can
pass, so none of its late acknowledgements is missing from the final log. A
replica outside the published in-sync set never takes the Lease. A master that stops
gives its Lease up even when a renewal it cancelled lands just before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import signal
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import definition_pb2 as pb
from tests.k8s.cluster_members import (
    CLUSTER,
    CLUSTER_DEADLINE_S,
    TOPIC,
    Cluster,
    pull_all,
    pull_placed,
    route,
)
from tests.support.kube_control_plane import ControlPlane
from tests.support.waiting import wait_for

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage, SendReceipt
from skiff_broker.cluster.config import ClusterConfig
from skiff_broker.cluster.kube_client import KubeClient
from skiff_broker.cluster.lease_elector import LeaseElector
from skiff_broker.cluster.lease_record import LeaseRecord, now_micro
from skiff_broker.ha.epoch_file import EpochFile

pytestmark = pytest.mark.crash

GROUP = "orders-a"


@pytest.fixture
def cluster(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Cluster]:
    members = Cluster(control_plane, tmp_path)
    try:
        yield members
    finally:
        members.cleanup()


class Producing:
    """Official-client producers sending until stopped; every acknowledged message kept.

    A failed send makes the producer ask the bootstrap broker for the route again (a
    new client), as an application would after an error.
    """

    def __init__(self, bootstrap: list[str]) -> None:
        self.bootstrap = bootstrap
        self.acknowledged: dict[str, bytes] = {}
        self.errors = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(2)]
        self._lock = threading.Lock()

    def __enter__(self) -> Producing:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def _run(self, number: int) -> None:
        counter = 0
        attempt = 0
        while not self._stop.is_set():
            endpoint = self.bootstrap[attempt % len(self.bootstrap)]
            attempt += 1
            producer = Producer(ClientConfiguration(endpoint, Credentials()), (TOPIC,))
            try:
                producer.startup()
                while not self._stop.is_set():
                    body = b"p%d-%06d" % (number, counter)
                    counter += 1
                    message = Message()
                    message.topic = TOPIC
                    message.body = body
                    receipt = producer.send(message)
                    with self._lock:
                        self.acknowledged[receipt.message_id] = body
            except Exception:
                with self._lock:
                    self.errors += 1
                time.sleep(0.5)
            finally:
                with contextlib.suppress(Exception):
                    producer.shutdown()

    def count(self) -> int:
        with self._lock:
            return len(self.acknowledged)


def epoch_of(cluster: Cluster, pod: str) -> int:
    epochs = EpochFile(str(cluster.brokers[pod].data_dir / "epoch"))
    epochs.load()
    return epochs.epoch


def new_master(cluster: Cluster, group: str, old: str) -> tuple[str, dict]:
    """Until a pod other than ``old`` holds the group's Lease and serves; its name and Lease."""

    def taken() -> tuple[str, dict] | None:
        lease = cluster.lease(group)
        if lease["holder"] in ("", old) or not lease["endpoint"]:
            return None
        return lease["holder"], lease

    return wait_for(taken, f"a replica to take {group} from {old}", deadline_s=CLUSTER_DEADLINE_S)


def start_group(cluster: Cluster, pods: list[str], mode: str = "SYNC") -> dict:
    """``pods[0]`` masters the group, with every other pod in sync."""
    cluster.start(GROUP, pods[0], mode=mode)
    cluster.wait_master(GROUP, pods[0])
    for pod in pods[1:]:
        cluster.start(GROUP, pod, mode=mode)
    return cluster.wait_master(GROUP, pods[0], in_sync=set(pods))


PODS = ["orders-a-0", "orders-a-1", "orders-a-2"]


def test_sigkill_of_the_master_passes_the_lease_and_loses_no_acknowledged_message(
    cluster: Cluster,
) -> None:
    before = start_group(cluster, PODS)
    first = cluster.brokers[PODS[0]]
    assert before["endpoint"] == first.endpoint
    wait_for(
        lambda: cluster.role_label(PODS[0]) == "master",
        "the master's label",
        deadline_s=CLUSTER_DEADLINE_S,
    )
    assert wait_for(
        lambda: {cluster.role_label(p) for p in PODS[1:]},
        "replica labels",
        deadline_s=CLUSTER_DEADLINE_S,
    ) == {"replica"}

    endpoints = [cluster.brokers[p].endpoint for p in PODS]
    with Producing(endpoints) as producing:
        wait_for(
            lambda: producing.count() >= 300, "load on the master", deadline_s=CLUSTER_DEADLINE_S
        )
        first.kill()
        successor, after = new_master(cluster, GROUP, PODS[0])
        # Producers go on against the new master once the other replica follows it.
        mark = producing.count()
        wait_for(
            lambda: producing.count() >= mark + 300,
            "sends to the new master",
            deadline_s=CLUSTER_DEADLINE_S,
        )

    promoted = cluster.brokers[successor]
    assert after["epoch"] == before["epoch"] + 1
    assert epoch_of(cluster, successor) == after["epoch"]
    assert after["endpoint"] == promoted.endpoint
    wait_for(
        lambda: cluster.role_label(successor) == "master",
        "the new master's label",
        deadline_s=CLUSTER_DEADLINE_S,
    )
    # Any broker's route now points producers at the new master only.
    for pod in PODS[1:]:
        served = {
            q.broker.endpoints.addresses[0].port for q in route(cluster.brokers[pod].endpoint)
        }
        assert served == {int(promoted.endpoint.rpartition(":")[2])}

    on_new_master = pull_all(promoted.endpoint)
    missing = [m for m in producing.acknowledged if m not in on_new_master]
    assert not missing, f"{len(missing)} of {len(producing.acknowledged)} acknowledged lost"
    assert all(on_new_master[m] == b for m, b in producing.acknowledged.items())

    # The old master comes back as a replica of the new one and copies the new term.
    returned = cluster.start(GROUP, PODS[0])
    cluster.wait_master(GROUP, successor, in_sync=set(PODS))
    with AdminClient(returned.endpoint) as admin:
        assert admin.broker_info().role == "REPLICA"
    wait_for(
        lambda: epoch_of(cluster, PODS[0]) == after["epoch"],
        "the old master to copy the new term",
        deadline_s=CLUSTER_DEADLINE_S,
    )
    assert pull_all(returned.endpoint).keys() >= producing.acknowledged.keys()
    wait_for(
        lambda: cluster.role_label(PODS[0]) == "replica",
        "the old master's label",
        deadline_s=CLUSTER_DEADLINE_S,
    )


def send_each_alone(endpoint: str, bodies: list[bytes]) -> list[SendReceipt | Exception]:
    """One request per message, all outstanding at once; each receipt or refusal."""

    def one(body: bytes) -> SendReceipt | Exception:
        try:
            with MessagingClient(endpoint, timeout=120) as client:
                return client.send([OutgoingMessage(TOPIC, body)])[0]
        except Exception as exc:
            return exc

    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(one, bodies))


@pytest.mark.parametrize("mode", ["SYNC", "ASYNC"])
def test_a_frozen_master_acknowledges_nothing_once_its_lease_can_pass(
    cluster: Cluster, mode: str
) -> None:
    start_group(cluster, PODS, mode=mode)
    frozen = cluster.brokers[PODS[0]]
    before: dict[str, SendReceipt] = {}
    for receipt in send_each_alone(frozen.endpoint, [b"before-%d" % i for i in range(40)]):
        assert isinstance(receipt, SendReceipt), receipt
        before[receipt.message_id] = receipt
    # Every replica holds them (the Lease lists them in sync again after the writes).
    cluster.wait_master(GROUP, PODS[0], in_sync=set(PODS))

    os.kill(frozen.proc.pid, signal.SIGSTOP)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # Sent while it is frozen: they wait in its socket until it runs again.
        late = pool.submit(send_each_alone, frozen.endpoint, [b"late-%d" % i for i in range(16)])
        successor, after = new_master(cluster, GROUP, PODS[0])
        promoted = cluster.brokers[successor]
        new_term = send_each_alone(promoted.endpoint, [b"new-%d" % i for i in range(40)])
        os.kill(frozen.proc.pid, signal.SIGCONT)
        answers = late.result()

    # The old master ran again with a stale Lease: it acknowledged none of them.
    acknowledged_late = [a for a in answers if isinstance(a, SendReceipt)]
    assert not acknowledged_late, f"a fenced master acknowledged {len(acknowledged_late)}"
    assert all(isinstance(r, SendReceipt) for r in new_term), new_term

    # It steps down, follows the new master and cuts only what it never acknowledged.
    wait_for(
        lambda: cluster.role_label(PODS[0]) == "replica",
        "the old master to step down",
        deadline_s=CLUSTER_DEADLINE_S,
    )
    cluster.wait_master(GROUP, successor, in_sync=set(PODS))
    final = pull_placed(promoted.endpoint)
    for message_id, receipt in before.items():
        assert message_id in final
        assert final[message_id][2] == receipt.offset
    for receipt in new_term:
        assert isinstance(receipt, SendReceipt)
        assert final[receipt.message_id][2] == receipt.offset
    # Every queue offset holds one message: no two masters acknowledged the same place.
    places = [(queue, offset) for _, queue, offset in final.values()]
    assert len(places) == len(set(places))
    wait_for(
        lambda: pull_all(frozen.endpoint).keys() == final.keys(),
        "the old master to hold the new master's messages",
        deadline_s=CLUSTER_DEADLINE_S,
    )
    assert after["epoch"] == epoch_of(cluster, PODS[0])


def test_a_replica_outside_the_in_sync_set_never_takes_the_lease(cluster: Cluster) -> None:
    pods = PODS[:2]
    start_group(cluster, pods, mode="ASYNC")
    master, replica = (cluster.brokers[p] for p in pods)
    replica.kill()
    # The master publishes that the replica no longer holds what it acknowledges...
    cluster.wait_master(GROUP, pods[0], in_sync={pods[0]})
    only_on_master = send_each_alone(master.endpoint, [b"only-%d" % i for i in range(50)])
    assert all(isinstance(r, SendReceipt) for r in only_on_master)
    master.kill()

    # ... so the replica, started again while the group has no master, does not take over.
    behind = cluster.start(GROUP, pods[1], mode="ASYNC")
    wait_for(
        lambda: any("not in its in-sync set" in r.get("msg", "") for r in behind.log_lines()),
        "the replica to decline the expired Lease",
        deadline_s=CLUSTER_DEADLINE_S,
    )
    lease = cluster.lease(GROUP)
    assert lease["holder"] == pods[0]
    with AdminClient(behind.endpoint) as admin:
        assert admin.broker_info().role == "REPLICA"
    # Its queues are offered for reading only.
    assert {q.permission for q in route(behind.endpoint)} <= {pb.Permission.READ}

    # The pod that is in the set comes back and takes a new term; the replica follows it.
    returned = cluster.start(GROUP, pods[0], mode="ASYNC")
    after = cluster.wait_master(GROUP, pods[0], in_sync=set(pods))
    assert after["epoch"] == lease["epoch"] + 1
    wanted = {r.message_id for r in only_on_master if isinstance(r, SendReceipt)}
    wait_for(
        lambda: wanted <= pull_all(behind.endpoint).keys(),
        "the replica to copy them",
        deadline_s=CLUSTER_DEADLINE_S,
    )
    assert wanted <= pull_all(returned.endpoint).keys()


def test_a_master_stopped_cleanly_hands_its_lease_to_an_in_sync_replica(
    cluster: Cluster,
) -> None:
    before = start_group(cluster, PODS[:2], mode="ASYNC")
    acknowledged = send_each_alone(
        cluster.brokers[PODS[0]].endpoint, [b"m-%d" % i for i in range(30)]
    )
    cluster.wait_master(GROUP, PODS[0], in_sync=set(PODS[:2]))
    cluster.brokers[PODS[0]].stop()
    assert any("released the Lease" in r["msg"] for r in cluster.brokers[PODS[0]].log_lines())
    # Its replacement starts at once, as a deleted pod's does: it leaves the Lease to the
    # replica that kept running, and follows it.
    cluster.start(GROUP, PODS[0], mode="ASYNC")
    after = cluster.wait_master(GROUP, PODS[1], in_sync=set(PODS[:2]))
    assert after["epoch"] == before["epoch"] + 1
    stored = pull_all(cluster.brokers[PODS[1]].endpoint)
    assert {r.message_id for r in acknowledged if isinstance(r, SendReceipt)} <= stored.keys()


class RenewalLandsBetween(KubeClient):
    """The API server, with one renewal of the Lease landing between a read and the next
    write: a renewal that ``stop()`` cancelled while its request was already on the wire."""

    def __init__(self, kubeconfig: Path) -> None:
        super().__init__(KubeClient.from_environment(str(kubeconfig)).api_client)
        self._renewer = KubeClient.from_environment(str(kubeconfig))
        self.renewals = 0

    def replace_lease(self, namespace: str, lease: dict) -> dict:
        if not self.renewals:
            self.renewals += 1
            late = LeaseRecord.from_object(self._renewer.get_lease(namespace, GROUP))
            late.renew_time = now_micro()
            self._renewer.replace_lease(namespace, late.to_object())
        return super().replace_lease(namespace, lease)


def test_a_stopping_master_releases_its_lease_though_a_late_renewal_lands_first(
    cluster: Cluster,
) -> None:
    api = RenewalLandsBetween(cluster.kubeconfig)
    held = LeaseRecord(
        name=GROUP,
        cluster=CLUSTER,
        holder=PODS[0],
        epoch=4,
        in_sync=PODS[:2],
        acquire_time=now_micro(),
        renew_time=now_micro(),
    )
    api.create_lease(cluster.namespace, held.to_object())
    config = ClusterConfig(name=CLUSTER, namespace=cluster.namespace, pod_name=PODS[0])
    # Releasing touches the Lease only: this broker has no replication service running.
    elector = LeaseElector(
        api, config, GROUP, types.SimpleNamespace(master=None), client_endpoint=str
    )
    elector._holding = True

    asyncio.run(elector.stop())

    assert api.renewals == 1
    lease = cluster.plane.get("lease", GROUP, cluster.namespace) or {}
    assert not lease["spec"].get("holderIdentity"), "the stopped master still holds the Lease"
    notes = lease["metadata"]["annotations"]
    assert notes["skiff.io/released-by"] == PODS[0]
    assert json.loads(notes["skiff.io/in-sync"]) == PODS[:2]
    assert notes["skiff.io/epoch"] == "4"
