import json
import pathlib

import pytest

from skiff_broker.metadata.state_file import StateFileError
from skiff_broker.metadata.topic_table import (
    MessageType,
    Permission,
    TopicConfig,
    TopicTable,
    validate_topic_name,
)


def test_topics_survive_a_reload_in_rocketmq_shape(tmp_path):
    path = str(tmp_path / "config" / "topics.json")
    table = TopicTable(path)
    table.put(TopicConfig("orders", 4, 2, Permission.READ_WRITE, MessageType.FIFO))
    table.put(TopicConfig("audit", 1, 1, Permission.READ, MessageType.NORMAL))

    document = json.loads(pathlib.Path(path).read_text())
    entry = document["topicConfigTable"]["orders"]
    assert entry["readQueueNums"] == 4
    assert entry["writeQueueNums"] == 2
    assert entry["perm"] == 6
    assert entry["order"] is True
    assert entry["attributes"] == {"message.type": "FIFO"}
    assert document["dataVersion"]["counter"] == 2

    reloaded = TopicTable(path)
    reloaded.load()
    assert [t.name for t in reloaded.all()] == ["audit", "orders"]
    orders = reloaded.get("orders")
    assert orders == TopicConfig("orders", 4, 2, Permission.READ_WRITE, MessageType.FIFO)
    audit = reloaded.get("audit")
    assert audit is not None and audit.readable and not audit.writable


def test_delete_is_persisted(tmp_path):
    path = str(tmp_path / "topics.json")
    table = TopicTable(path)
    table.put(TopicConfig("a"))
    assert table.delete("a") is True
    assert table.delete("a") is False
    reloaded = TopicTable(path)
    reloaded.load()
    assert reloaded.all() == []


@pytest.mark.parametrize("name", ["", "has space", "x" * 128, "semi;colon", "slash/"])
def test_invalid_topic_names_are_refused_with_a_reason(name):
    with pytest.raises(ValueError, match="topic name"):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["a", "Order_Events-1", "%RETRY%group", "%DLQ%group", "x" * 127])
def test_valid_topic_names(name):
    validate_topic_name(name)


def test_queue_counts_are_bounded(tmp_path):
    table = TopicTable(str(tmp_path / "topics.json"))
    with pytest.raises(ValueError, match="read queue count"):
        table.put(TopicConfig("t", read_queue_nums=0))
    assert table.get("t") is None


def test_a_corrupt_file_is_reported_not_ignored(tmp_path):
    path = tmp_path / "topics.json"
    path.write_text("{not json")
    with pytest.raises(StateFileError, match="not valid JSON"):
        TopicTable(str(path)).load()


def test_rocketmq_types_skiff_lacks_are_served_as_normal(tmp_path, caplog):
    # An Apache RocketMQ 5 topics.json: fastjson's layout, a MIXED topic, a system topic.
    path = tmp_path / "topics.json"
    path.write_text(
        '{\n\t"dataVersion":{"counter":4,"stateVersion":0,"timestamp":1764064000000},\n'
        '\t"topicConfigTable":{\n'
        '\t\t"mixed":{"attributes":{"message.type":"MIXED"},"order":false,"perm":6,'
        '"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"mixed",'
        '"topicSysFlag":0,"writeQueueNums":4},\n'
        '\t\t"store-maker":{"attributes":{},"order":false,"perm":7,"readQueueNums":1,'
        '"topicFilterType":"SINGLE_TAG","topicName":"store-maker","topicSysFlag":0,'
        '"writeQueueNums":1}\n\t}\n}'
    )
    table = TopicTable(str(path))
    table.load()
    mixed = table.get("mixed")
    assert mixed is not None and mixed.message_type is MessageType.NORMAL
    assert mixed.read_queue_nums == 4
    assert table.get("store-maker") is not None
    assert any("MIXED" in r.getMessage() for r in caplog.records)
