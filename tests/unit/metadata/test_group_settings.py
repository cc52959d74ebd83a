"""The consumer groups' settings file: RocketMQ's, read as it is, changed only as asked."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from skiff_broker.metadata.group_settings import GroupSettingsTable

ROCKETMQ_FILE = Path(__file__).resolve().parents[2] / "data/rocketmq5-store/config"


def test_an_apache_rocketmq_brokers_file_reads_as_it_is(tmp_path: Path) -> None:
    shutil.copy(ROCKETMQ_FILE / "subscriptionGroup.json", tmp_path / "subscriptionGroup.json")
    table = GroupSettingsTable(str(tmp_path / "subscriptionGroup.json"))
    table.load()
    assert table.setting("rmq-readers", "retryMaxTimes") == 16
    assert table.get("rmq-readers")["groupRetryPolicy"] == {"type": "CUSTOMIZED"}
    assert table.get("never-configured") is None
    assert table.effective("never-configured")["consumeEnable"] is True


def test_changes_are_written_before_they_return_and_bad_ones_change_nothing(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "subscriptionGroup.json")
    table = GroupSettingsTable(path)
    table.load()
    table.put({"groupName": "billing", "retryMaxTimes": 3, "consumeEnable": False})
    with pytest.raises(ValueError, match="retryMaxTimes must be between 0 and"):
        table.put({"groupName": "billing", "retryMaxTimes": -5})
    with pytest.raises(ValueError, match="consumeBroadcastEnable must be true or false"):
        table.put({"groupName": "billing", "consumeBroadcastEnable": "no"})
    reread = GroupSettingsTable(path)
    reread.load()
    assert reread.setting("billing", "retryMaxTimes") == 3
    assert reread.setting("billing", "consumeEnable") is False
    # A field left out has RocketMQ's default.
    assert reread.setting("billing", "consumeBroadcastEnable") is True
    assert reread.delete("billing") and not reread.delete("billing")
    again = GroupSettingsTable(path)
    again.load()
    assert again.all() == {}
