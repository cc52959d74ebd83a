"""State files: the .bak of the last good version, read back when the main file is damaged."""

import json
import logging
import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.metadata import fastjson_text
from skiff_broker.metadata.consumer_offsets import ConsumerOffsetTable
from skiff_broker.metadata.state_file import StateFileError
from skiff_broker.metadata.topic_table import TopicConfig, TopicTable

DAMAGE = {
    "empty": b"",
    "blank": b"  \n",
    "truncated": b'{"offsetTable": {"orders@g": {"0": 1',
    "not an object": b"[1, 2, 3]",
    "binary": b"\x00\xff\x00\xfe",
}


def _two_versions(path: pathlib.Path) -> ConsumerOffsetTable:
    """Offsets persisted twice: the .bak holds the first version, the file the second."""
    table = ConsumerOffsetTable(str(path))
    table.load()
    table.commit("g", "orders", 0, 5)
    table.persist()
    table.commit("g", "orders", 0, 9)
    table.persist()
    return table


def test_each_write_keeps_the_version_it_replaces_as_bak(tmp_path):
    path = tmp_path / "consumerOffset.json"
    _two_versions(path)
    assert json.loads(path.read_text())["offsetTable"] == {"orders@g": {"0": 9}}
    assert json.loads((tmp_path / "consumerOffset.json.bak").read_text())["offsetTable"] == {
        "orders@g": {"0": 5}
    }


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_file_is_read_from_its_bak_with_a_warning(tmp_path, caplog, damage):
    path = tmp_path / "consumerOffset.json"
    _two_versions(path)
    path.write_bytes(damage)
    table = ConsumerOffsetTable(str(path))
    with caplog.at_level(logging.WARNING):
        table.load()
    assert table.query("g", "orders", 0) == 5
    warning = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1
    assert "consumerOffset.json.bak" in warning[0].getMessage()


def test_a_file_of_the_wrong_shape_is_read_from_its_bak(tmp_path):
    path = tmp_path / "topics.json"
    table = TopicTable(str(path))
    table.put(TopicConfig("orders", 4, 4))
    table.compact()
    table.put(TopicConfig("events", 2, 2))
    table.compact()
    path.write_text(json.dumps({"topicConfigTable": {"orders": {"topicName": "orders"}}}))
    reloaded = TopicTable(str(path))
    reloaded.load()
    # The .bak is the version before the last rewrite: only "orders" existed then.
    assert [t.name for t in reloaded.all()] == ["orders"]


def test_the_write_after_reading_the_bak_keeps_the_bak_good(tmp_path):
    path = tmp_path / "consumerOffset.json"
    _two_versions(path)
    path.write_bytes(b"garbage")
    table = ConsumerOffsetTable(str(path))
    table.load()
    table.commit("g", "orders", 1, 3)
    table.persist()
    backup = json.loads((tmp_path / "consumerOffset.json.bak").read_text())
    assert backup["offsetTable"] == {"orders@g": {"0": 5}}
    assert json.loads(path.read_text())["offsetTable"] == {"orders@g": {"0": 5, "1": 3}}


def test_a_missing_file_with_a_bak_is_read_from_the_bak(tmp_path):
    path = tmp_path / "consumerOffset.json"
    _two_versions(path)
    path.unlink()
    table = ConsumerOffsetTable(str(path))
    table.load()
    assert table.query("g", "orders", 0) == 5


def test_both_damaged_fails_with_one_line_naming_the_file_and_what_to_do(tmp_path):
    path = tmp_path / "consumerOffset.json"
    _two_versions(path)
    path.write_bytes(b"")
    (tmp_path / "consumerOffset.json.bak").write_bytes(b"{nope")
    with pytest.raises(StateFileError) as caught:
        ConsumerOffsetTable(str(path)).load()
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message and "is empty" in message
    assert "consumerOffset.json.bak is not valid JSON" in message
    assert "--discard-damaged-state" in message
    assert "remove it" not in message


def test_discarding_damaged_state_keeps_the_damaged_file_aside(tmp_path, caplog):
    path = tmp_path / "consumerOffset.json"
    path.write_bytes(b"{broken")
    table = ConsumerOffsetTable(str(path))
    with caplog.at_level(logging.WARNING):
        table.load(discard_damaged=True)
    assert table.query("g", "orders", 0) == -1
    assert (tmp_path / "consumerOffset.json.damaged").read_bytes() == b"{broken"
    assert not path.exists()
    assert any("committed position" in r.getMessage() for r in caplog.records)


def test_rocketmq_consumer_offsets_with_bare_integer_keys_read(tmp_path):
    # As Apache RocketMQ 5 writes it (fastjson, pretty-printed), dataVersion included.
    path = tmp_path / "consumerOffset.json"
    path.write_text(
        "{\n"
        '\t"dataVersion":{\n\t\t"counter":3,\n\t\t"stateVersion":0,\n'
        '\t\t"timestamp":1764064000000\n\t},\n'
        '\t"offsetTable":{\n'
        '\t\t"%RETRY%readers@readers":{0:0\n\t\t},\n'
        '\t\t"orders@readers":{0:4,1:3,2:4,3:4\n\t\t}\n'
        "\t}\n}"
    )
    table = ConsumerOffsetTable(str(path))
    table.load()
    assert table.offsets_of("readers", "orders") == {0: 4, 1: 3, 2: 4, 3: 4}
    assert table.offsets_of("readers", "%RETRY%readers") == {0: 0}


def _fastjson_dumps(value: object) -> str:
    """Objects with int keys written as fastjson does: the keys bare."""
    if isinstance(value, dict):
        items = (
            f"{k if isinstance(k, int) else json.dumps(k)}:{_fastjson_dumps(v)}"
            for k, v in value.items()
        )
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_fastjson_dumps(v) for v in value) + "]"
    return json.dumps(value)


_leaves = st.one_of(st.integers(-(2**63), 2**63), st.text(max_size=8), st.booleans(), st.none())
_documents = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.integers(-(2**31), 2**31), children, max_size=4),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    ),
    max_leaves=20,
)


def _with_text_keys(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _with_text_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_text_keys(v) for v in value]
    return value


@given(_documents)
def test_fastjson_text_reads_what_fastjson_writes(document):
    assert fastjson_text.loads(_fastjson_dumps(document)) == _with_text_keys(document)


@given(_documents)
def test_fastjson_text_leaves_strict_json_as_it_is(document):
    strict = json.dumps(_with_text_keys(document))
    assert fastjson_text.quote_bare_integer_keys(strict) == strict


def test_a_missing_file_with_a_damaged_bak_fails_rather_than_start_empty(tmp_path):
    path = tmp_path / "consumerOffset.json"
    (tmp_path / "consumerOffset.json.bak").write_bytes(b"\x00" * 64)
    with pytest.raises(StateFileError, match=r"consumerOffset\.json does not exist"):
        ConsumerOffsetTable(str(path)).load()


def test_discarding_twice_keeps_both_damaged_copies(tmp_path):
    path = tmp_path / "topics.json"
    for damage in (b"first", b"second"):
        path.write_bytes(damage)
        TopicTable(str(path)).load(discard_damaged=True)
    assert (tmp_path / "topics.json.damaged").read_bytes() == b"first"
    assert (tmp_path / "topics.json.damaged.1").read_bytes() == b"second"
