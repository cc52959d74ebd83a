import json
import pathlib

import pytest

from skiff_broker.metadata.state_file import StateFileError
from skiff_broker.metadata.topic_table import (
    MIN_COMPACTION,
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
    table.close()  # a clean stop leaves topics.json whole

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
    with pytest.raises(ValueError, match="The specified topic"):
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


def _topics_in_file(path: pathlib.Path) -> set[str]:
    if not path.exists():
        return set()
    return set(json.loads(path.read_text())["topicConfigTable"])


def test_a_change_is_durable_without_rewriting_the_table(tmp_path):
    path = tmp_path / "topics.json"
    table = TopicTable(str(path))
    for i in range(MIN_COMPACTION - 2):
        table.put(TopicConfig(f"t{i}"))
    assert table.delete("t0")
    # No close: as after a SIGKILL. The file was never rewritten; the journal holds it all.
    assert _topics_in_file(path) == set()
    reloaded = TopicTable(str(path))
    reloaded.load()
    assert {t.name for t in reloaded.all()} == {f"t{i}" for i in range(1, MIN_COMPACTION - 2)}
    assert reloaded.data_version["counter"] == MIN_COMPACTION - 1


def test_the_table_is_rewritten_once_the_journal_holds_enough(tmp_path):
    path = tmp_path / "topics.json"
    table = TopicTable(str(path))
    for i in range(MIN_COMPACTION):
        table.put(TopicConfig(f"t{i}"))
    assert _topics_in_file(path) == {f"t{i}" for i in range(MIN_COMPACTION)}
    assert pathlib.Path(f"{path}.journal").stat().st_size == 0
    table.put(TopicConfig("after"))
    reloaded = TopicTable(str(path))
    reloaded.load()
    assert len(reloaded.all()) == MIN_COMPACTION + 1


def test_a_torn_last_change_is_dropped_and_the_rest_kept(tmp_path, caplog):
    path = tmp_path / "topics.json"
    table = TopicTable(str(path))
    table.put(TopicConfig("kept"))
    table.put(TopicConfig("torn"))
    journal = pathlib.Path(f"{path}.journal")
    journal.write_bytes(journal.read_bytes()[:-7])  # the crash cut the last append
    reloaded = TopicTable(str(path))
    reloaded.load()
    assert [t.name for t in reloaded.all()] == ["kept"]


def test_a_damaged_change_with_good_ones_after_it_is_skipped_and_named(tmp_path, caplog):
    path = tmp_path / "topics.json"
    table = TopicTable(str(path))
    for name in ("first", "damaged", "last"):
        table.put(TopicConfig(name))
    journal = pathlib.Path(f"{path}.journal")
    lines = journal.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b"damaged", b"dAmaged")
    journal.write_bytes(b"\n".join(lines))
    reloaded = TopicTable(str(path))
    reloaded.load()
    assert [t.name for t in reloaded.all()] == ["first", "last"]
    assert "line(s) 2" in caplog.text


def test_a_crash_between_rewrite_and_journal_clear_changes_nothing(tmp_path):
    path = tmp_path / "topics.json"
    table = TopicTable(str(path))
    table.put(TopicConfig("a", 2, 2))
    table.put(TopicConfig("b"))
    table.delete("b")
    journal = pathlib.Path(f"{path}.journal")
    left = journal.read_bytes()
    table.compact()
    journal.write_bytes(left)  # the rewrite reached the disk, the clear did not
    reloaded = TopicTable(str(path))
    reloaded.load()
    assert reloaded.all() == [TopicConfig("a", 2, 2)]


def test_loading_writes_nothing(tmp_path):
    # Tools read a running broker's table: only the broker rewrites it.
    path = tmp_path / "topics.json"
    table = TopicTable(str(path))
    table.put(TopicConfig("a"))
    before = pathlib.Path(f"{path}.journal").read_bytes()
    TopicTable(str(path)).load()
    assert not path.exists()
    assert pathlib.Path(f"{path}.journal").read_bytes() == before


def test_the_journal_is_private(tmp_path):
    path = tmp_path / "topics.json"
    TopicTable(str(path)).put(TopicConfig("a"))
    assert pathlib.Path(f"{path}.journal").stat().st_mode & 0o777 == 0o600
