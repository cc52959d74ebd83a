"""Consumer groups' settings and request modes follow the master to its replica and
outlive it: real master and replica processes on loopback, spoken to in remoting frames.

A group paused on the master (consumeEnable=false, ``updateSubGroup``) and a group set
to POP (``setConsumeMode``) reach the replica, which refuses to change either; after the
master is SIGKILLed and the replica promoted, the paused group's pulls are still refused
and its mode is still POP, and the promoted broker takes changes again. A replica
SIGKILLed and started again while its master is down has them from its own files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.test_replication import Group, info, wait_caught_up
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of
from tests.support.remoting_client import Remoting
from tests.support.waiting import wait_for

from skiff_broker.client.admin import AdminClient
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.remoting.frames import RemotingCommand

TOPIC = "payroll"
PAUSED = "clerks"
POPPERS = "poppers"
# RocketMQ's response codes a client sees here.
SUCCESS, SERVICE_NOT_AVAILABLE, NO_PERMISSION = 0, 14, 16


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    brokers = Group(tmp_path)
    create_topics(data_dir_of(tmp_path / "master"), TopicConfig(TOPIC, 1, 1))
    try:
        yield brokers
    finally:
        brokers.cleanup()


def remoting(broker: BrokerProcess) -> Remoting:
    return Remoting(broker.remoting_endpoint)


def update_group(client: Remoting, group: str, **settings: object) -> RemotingCommand:
    # UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with a SubscriptionGroupConfig body.
    return client.call(200, json.dumps({"groupName": group, **settings}).encode())


def group_config(client: Remoting, group: str) -> dict | None:
    answer = client.call(352, group=group)  # GET_SUBSCRIPTIONGROUP_CONFIG
    return json.loads(answer.body) if answer.code == SUCCESS else None


def set_mode(client: Remoting, group: str, mode: str) -> RemotingCommand:
    body = {"topic": TOPIC, "consumerGroup": group, "mode": mode, "popShareQueueNum": 0}
    return client.call(401, json.dumps(body).encode())  # SET_MESSAGE_REQUEST_MODE


def assigned_mode(client: Remoting, group: str) -> str:
    body = {"topic": TOPIC, "consumerGroup": group, "clientId": "c", "strategyName": "AVG"}
    answer = client.call(400, json.dumps(body).encode())  # QUERY_ASSIGNMENT
    assert answer.code == SUCCESS, answer.remark
    assignments = json.loads(answer.body)["messageQueueAssignments"] or [{"mode": "PULL"}]
    return str(assignments[0]["mode"])


def pull(client: Remoting, group: str) -> RemotingCommand:
    return client.call(
        11, consumerGroup=group, topic=TOPIC, queueId=0, queueOffset=0, maxMsgNums=8,
        sysFlag=0x4, commitOffset=0, suspendTimeoutMillis=0, subscription="*",
        expressionType="TAG",
    )  # fmt: skip


def send(client: Remoting, unique: str) -> RemotingCommand:
    properties = f"UNIQ_KEY\x01{unique}\x02TAGS\x01T\x02WAIT\x01true\x02"
    return client.call(
        310, b"body-" + unique.encode(), a="p", b=TOPIC, c="TBW102", d=4, e=0, f=0, g=0, h=0,
        i=properties,
    )  # fmt: skip


def settle_on_the_master(master: BrokerProcess) -> None:
    """A message for the paused group to want, the group paused, the poppers set to POP."""
    on_master = remoting(master)
    try:
        assert send(on_master, "PAY-1").code == SUCCESS
        answer = update_group(on_master, PAUSED, consumeEnable=False, retryMaxTimes=2)
        assert answer.code == SUCCESS, answer.remark
        assert set_mode(on_master, POPPERS, "POP").code == SUCCESS
        assert pull(on_master, PAUSED).code == NO_PERMISSION
    finally:
        on_master.close()


def test_group_settings_and_modes_reach_the_replica_and_outlive_the_master(group: Group):
    master = group.master("master")
    replica = group.replica("replica", master)
    settle_on_the_master(master)

    on_replica = remoting(replica)
    try:
        wait_for(lambda: group_config(on_replica, PAUSED) is not None, "the group on the replica")
        config = group_config(on_replica, PAUSED)
        assert config is not None
        assert (config["consumeEnable"], config["retryMaxTimes"]) == (False, 2)
        wait_for(lambda: assigned_mode(on_replica, POPPERS) == "POP", "the mode on the replica")
        # A replica serves reads, and applies its master's settings to them.
        wait_caught_up(master, replica)
        refused = pull(on_replica, PAUSED)
        assert refused.code == NO_PERMISSION, refused.remark
        assert "subscription group no permission, clerks" in refused.remark
        # Changes belong on the master.
        refused = update_group(on_replica, PAUSED, consumeEnable=True)
        assert refused.code == SERVICE_NOT_AVAILABLE
        assert refused.remark.endswith("change groups on the master"), refused.remark
        refused = set_mode(on_replica, POPPERS, "PULL")
        assert refused.code == SERVICE_NOT_AVAILABLE
        assert refused.remark.endswith("set the mode on the master"), refused.remark
    finally:
        on_replica.close()

    wait_for(lambda: info(replica).replica_in_sync, "the replica in sync")
    master.kill()
    with AdminClient(replica.endpoint) as admin:
        assert admin.promote().role == "MASTER"

    promoted = remoting(replica)
    try:
        refused = pull(promoted, PAUSED)
        assert refused.code == NO_PERMISSION, refused.remark
        config = group_config(promoted, PAUSED)
        assert config is not None and config["retryMaxTimes"] == 2
        assert assigned_mode(promoted, POPPERS) == "POP"
        # The promoted broker is the master now: the group can be resumed there.
        answer = update_group(promoted, PAUSED, consumeEnable=True, retryMaxTimes=2)
        assert answer.code == SUCCESS, answer.remark
        resumed = pull(promoted, PAUSED)
        assert resumed.code == SUCCESS, resumed.remark
    finally:
        promoted.close()


def test_a_replica_restarted_while_its_master_is_down_keeps_them(group: Group):
    master = group.master("master")
    replica = group.replica("replica", master)
    settle_on_the_master(master)
    on_replica = remoting(replica)
    try:
        wait_for(lambda: group_config(on_replica, PAUSED) is not None, "the group on the replica")
        wait_for(lambda: assigned_mode(on_replica, POPPERS) == "POP", "the mode on the replica")
    finally:
        on_replica.close()
    wait_caught_up(master, replica)
    address = master.ha_endpoint
    master.kill()
    replica.kill()

    restarted = group.replica("replica", address)
    client = remoting(restarted)
    try:
        refused = pull(client, PAUSED)
        assert refused.code == NO_PERMISSION, refused.remark
        config = group_config(client, PAUSED)
        assert config is not None and config["retryMaxTimes"] == 2
        assert assigned_mode(client, POPPERS) == "POP"
    finally:
        client.close()
