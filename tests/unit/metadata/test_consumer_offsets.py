import json
import pathlib

from skiff_broker.metadata.consumer_offsets import ConsumerOffsetTable


def test_offsets_round_trip_in_rocketmq_shape(tmp_path):
    path = str(tmp_path / "consumerOffset.json")
    table = ConsumerOffsetTable(path)
    table.commit("g1", "orders", 0, 12)
    table.commit("g1", "orders", 3, 7)
    table.commit("g2", "orders", 0, 1)
    assert table.persist() is True

    assert json.loads(pathlib.Path(path).read_text()) == {
        "offsetTable": {"orders@g1": {"0": 12, "3": 7}, "orders@g2": {"0": 1}}
    }
    reloaded = ConsumerOffsetTable(path)
    reloaded.load()
    assert reloaded.query("g1", "orders", 3) == 7
    assert reloaded.query("g1", "orders", 1) == -1
    assert reloaded.offsets_of("g1", "orders") == {0: 12, 3: 7}
    assert reloaded.groups_of("orders") == ["g1", "g2"]


def test_persist_writes_only_when_something_changed(tmp_path):
    table = ConsumerOffsetTable(str(tmp_path / "consumerOffset.json"))
    assert table.persist() is False
    table.commit("g", "t", 0, 1)
    assert table.persist() is True
    assert table.persist() is False


def test_removing_a_topic_forgets_its_groups(tmp_path):
    path = str(tmp_path / "consumerOffset.json")
    table = ConsumerOffsetTable(path)
    table.commit("g", "a", 0, 5)
    table.commit("g", "b", 0, 6)
    table.remove_topic("a")
    table.persist()
    reloaded = ConsumerOffsetTable(path)
    reloaded.load()
    assert reloaded.query("g", "a", 0) == -1
    assert reloaded.query("g", "b", 0) == 6


def test_groups_are_listed_with_their_topics_and_removed_everywhere(tmp_path):
    path = str(tmp_path / "consumerOffset.json")
    table = ConsumerOffsetTable(path)
    table.commit("billing", "orders", 0, 3)
    table.commit("billing", "refunds", 1, 4)
    table.commit("audit", "orders", 0, 1)
    # A group name may hold the separator; topic names cannot.
    table.commit("odd@name", "orders", 0, 2)
    assert table.groups() == {
        "audit": ["orders"],
        "billing": ["orders", "refunds"],
        "odd@name": ["orders"],
    }
    assert table.remove_group("billing") == ["orders", "refunds"]
    assert table.remove_group("odd@name") == ["orders"]
    assert table.remove_group("billing") == []
    table.persist()
    reloaded = ConsumerOffsetTable(path)
    reloaded.load()
    assert reloaded.groups() == {"audit": ["orders"]}


def test_commit_times_are_known_for_moves_since_start_only(tmp_path):
    path = str(tmp_path / "consumerOffset.json")
    table = ConsumerOffsetTable(path)
    table.commit("g", "t", 0, 5)
    moved = table.commit_time("g", "t", 0)
    assert moved > 0
    assert table.commit_time("g", "t", 1) == 0
    table.persist()
    reloaded = ConsumerOffsetTable(path)
    reloaded.load()
    assert reloaded.commit_time("g", "t", 0) == 0
