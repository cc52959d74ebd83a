"""`skiff store check` opens a data directory as its files were made."""

from pathlib import Path

from skiff_broker.store.config import ROCKETMQ_CONSUME_QUEUE_FILE_ENTRIES
from skiff_broker.store.store_check import config_for


def test_a_store_without_consume_queues_yet_opens_with_the_default_queue_files(
    tmp_path: Path,
) -> None:
    # A broker that crashed before its dispatcher built any consume queue leaves only
    # the commit log; checking it must not fail for want of a queue file to measure.
    commit_log = tmp_path / "commitlog"
    commit_log.mkdir()
    with open(commit_log / "00000000000000000000", "wb") as segment:
        segment.truncate(1024 * 1024)

    config = config_for(str(tmp_path))

    assert config.consume_queue_units_per_file == ROCKETMQ_CONSUME_QUEUE_FILE_ENTRIES
    assert config.commit_log_file_size == 1024 * 1024
