"""A replica takes its master's consumer-group settings and request modes from METADATA.

Real, unstarted brokers with their own files: the master's tables go through the
document's bytes into the replica's tables and its own files (read back by a fresh
table, as after the replica's restart); a document from a master older than these tables
(no "groups", no "requestModes") leaves the replica's as they are; entries that would be
refused if set are a bad frame.
"""

from __future__ import annotations

import json
import os

import pytest

from skiff_broker.config import BrokerConfig
from skiff_broker.ha.framing import FramingError
from skiff_broker.ha.replicated_metadata import apply_metadata, metadata_document
from skiff_broker.metadata.group_settings import GroupSettingsTable
from skiff_broker.metadata.request_modes import RequestModeTable
from skiff_broker.runtime import Broker
from skiff_broker.store.config import StoreConfig

MASTER = "127.0.0.1:1"


def broker(directory) -> Broker:
    made = Broker(BrokerConfig(store=StoreConfig(data_dir=str(directory))))
    for table in (made.topics, made.offsets, made.users, made.group_settings, made.request_modes):
        table.load()
    return made


@pytest.fixture
def master(tmp_path) -> Broker:
    made = broker(tmp_path / "master")
    made.group_settings.put({"groupName": "paused", "consumeEnable": False, "retryMaxTimes": 3})
    made.request_modes.put(
        {"topic": "orders", "consumerGroup": "poppers", "mode": "POP", "popShareQueueNum": 2}
    )
    return made


@pytest.fixture
def replica(tmp_path) -> Broker:
    made = broker(tmp_path / "replica")
    made.group_settings.put({"groupName": "local", "consumeBroadcastEnable": False})
    made.request_modes.put({"topic": "local", "consumerGroup": "local", "mode": "POP"})
    return made


def the_files_of(replica: Broker) -> tuple[GroupSettingsTable, RequestModeTable]:
    config_dir = replica.config.store.config_dir
    groups = GroupSettingsTable(os.path.join(config_dir, "subscriptionGroup.json"))
    modes = RequestModeTable(os.path.join(config_dir, "messageRequestMode.json"))
    groups.load()
    modes.load()
    return groups, modes


def test_the_masters_settings_and_modes_replace_the_replicas_and_are_in_its_files(master, replica):
    apply_metadata(replica, json.loads(metadata_document(master)), MASTER)
    for groups, modes in [(replica.group_settings, replica.request_modes), the_files_of(replica)]:
        assert list(groups.all()) == ["paused"]
        assert groups.setting("paused", "consumeEnable") is False
        assert groups.setting("paused", "retryMaxTimes") == 3
        assert modes.mode("orders", "poppers") == "POP"
        assert modes.mode("local", "local") == "PULL"


def test_a_master_whose_groups_have_no_settings_clears_the_replicas(tmp_path, replica):
    apply_metadata(replica, json.loads(metadata_document(broker(tmp_path / "empty"))), MASTER)
    assert replica.group_settings.all() == {}
    assert replica.request_modes.mode("local", "local") == "PULL"


def test_a_document_from_an_older_master_leaves_the_replicas_tables_alone(master, replica):
    document = json.loads(metadata_document(master))
    del document["groups"], document["requestModes"]
    apply_metadata(replica, document, MASTER)
    assert list(replica.group_settings.all()) == ["local"]
    assert replica.request_modes.mode("local", "local") == "POP"
    # The tables it does carry are taken.
    assert replica.offsets.snapshot() == master.offsets.snapshot()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("groups", [], "groups is not an object"),
        ("groups", {"g": {"groupName": "g", "retryMaxTimes": -1}}, "retryMaxTimes must be"),
        (
            "requestModes",
            {"t": {"g": {"topic": "t", "consumerGroup": "g", "mode": "PUSH"}}},
            "PULL or POP",
        ),
        ("requestModes", {"t": 5}, "must be an object"),
    ],
)
def test_entries_that_would_be_refused_if_set_are_a_bad_frame_and_change_nothing(
    master, replica, key, value, message
):
    document = json.loads(metadata_document(master))
    document[key] = value
    with pytest.raises(FramingError, match=message):
        apply_metadata(replica, document, MASTER)
    if key == "requestModes":
        # The groups came before the bad modes and were taken; the modes were not.
        assert replica.request_modes.mode("local", "local") == "POP"
    else:
        assert list(replica.group_settings.all()) == ["local"]
        assert list(the_files_of(replica)[0].all()) == ["local"]


def test_an_unchanged_document_writes_no_file(master, replica):
    apply_metadata(replica, json.loads(metadata_document(master)), MASTER)
    path = os.path.join(replica.config.store.config_dir, "subscriptionGroup.json")
    before = os.stat(path).st_mtime_ns
    os.utime(path, ns=(before - 10**9, before - 10**9))
    apply_metadata(replica, json.loads(metadata_document(master)), MASTER)
    assert os.stat(path).st_mtime_ns == before - 10**9
