"""The epoch file: terms survive restarts, damage is noticed, and logs are compared by term."""

from __future__ import annotations

from pathlib import Path

import pytest

from skiff_broker.ha.epoch_file import (
    EpochEntry,
    EpochFile,
    consistent_point,
)


def test_terms_are_numbered_and_survive_a_reload(tmp_path: Path) -> None:
    path = str(tmp_path / "epoch")
    epochs = EpochFile(path)
    epochs.load()
    assert epochs.entries == [] and epochs.epoch == 0
    assert epochs.new_term(0) == EpochEntry(1, 0)
    assert epochs.new_term(4096) == EpochEntry(2, 4096)

    again = EpochFile(path)
    again.load()
    assert again.entries == [EpochEntry(1, 0), EpochEntry(2, 4096)]
    assert (tmp_path / "epoch").read_text().splitlines()[2:] == ["1-0", "2-4096"]


def test_a_new_term_never_reuses_a_number_heard_of(tmp_path: Path) -> None:
    epochs = EpochFile(str(tmp_path / "epoch"))
    epochs.replace([EpochEntry(1, 0)])
    # The old master began term 2 past this replica's end; promotion must skip it.
    assert epochs.new_term(800, above=2) == EpochEntry(3, 800)


def test_a_damaged_file_is_read_from_its_backup_and_never_reuses_a_term(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "epoch"
    epochs = EpochFile(str(path))
    epochs.new_term(0)
    epochs.new_term(100)
    # The .bak holds the version before the newest term.
    assert (tmp_path / "epoch.bak").read_text().splitlines()[2:] == ["1-0"]
    path.write_text(path.read_text().replace("2-100", "2-999"))
    again = EpochFile(str(path))
    with caplog.at_level("WARNING"):
        again.load()
    assert again.entries == [EpochEntry(1, 0)]
    assert "read its previous version" in caplog.text
    # Term 2 may have been used: the next one is 3.
    assert again.new_term(500) == EpochEntry(3, 500)
    # The damaged version did not become the .bak; the new one is whole.
    assert (tmp_path / "epoch.bak").read_text().splitlines()[2:] == ["1-0"]
    reread = EpochFile(str(path))
    reread.load()
    assert reread.entries == [EpochEntry(1, 0), EpochEntry(3, 500)]


@pytest.mark.parametrize("damage", ["empty", "garbage", "flipped"])
def test_when_neither_copy_can_be_read_the_log_is_one_term_above_every_legible_epoch(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "epoch"
    epochs = EpochFile(str(path))
    for start in (0, 100, 200):
        epochs.new_term(start)
    for copy in (path, tmp_path / "epoch.bak"):
        if damage == "empty":
            copy.write_bytes(b"")
        elif damage == "garbage":
            copy.write_bytes(bytes(range(50)))
        else:
            copy.write_text(copy.read_text().replace("2-100", "2-107"))
    again = EpochFile(str(path))
    with caplog.at_level("WARNING"):
        again.load()
    assert again.entries == []
    assert "rebuilt from the commit log" in caplog.text
    # Epochs 2 and 3 are still legible in the flipped copies.
    assert again.new_term(0).epoch == (4 if damage == "flipped" else 1)


def test_replace_and_truncate_keep_the_file_in_step(tmp_path: Path) -> None:
    path = str(tmp_path / "epoch")
    epochs = EpochFile(path)
    epochs.replace([EpochEntry(1, 0), EpochEntry(3, 500), EpochEntry(4, 900)])
    epochs.truncate_after(500)
    reloaded = EpochFile(path)
    reloaded.load()
    assert reloaded.entries == [EpochEntry(1, 0)]
    with pytest.raises(ValueError, match="out of order"):
        epochs.replace([EpochEntry(2, 0), EpochEntry(1, 10)])


T1, T2, T3 = EpochEntry(1, 0), EpochEntry(2, 1000), EpochEntry(3, 1500)


@pytest.mark.parametrize(
    ("mine", "my_end", "theirs", "their_end", "expected"),
    [
        # Same term, the replica behind: it continues at its own end.
        ([T1], 700, [T1], 900, 700),
        # The replica got further in term 1 than the new master before it took over
        # (term 2 starts at 1000): everything past 1000 is cut.
        ([T1], 1300, [T1, T2], 1800, 1000),
        # Both know term 2; the replica is behind in it.
        ([T1, T2], 1200, [T1, T2, T3], 1800, 1200),
        # The replica saw a term 2 the master never had (another master's).
        ([T1, EpochEntry(2, 800)], 1100, [T1, EpochEntry(3, 900)], 1500, 800),
        # An empty replica starts at the beginning.
        ([], 0, [T1, T2], 1800, 0),
    ],
)
def test_consistent_point(
    mine: list[EpochEntry], my_end: int, theirs: list[EpochEntry], their_end: int, expected: int
) -> None:
    assert consistent_point(mine, my_end, theirs, their_end) == expected


def test_logs_without_a_common_term_have_no_consistent_point() -> None:
    assert consistent_point([EpochEntry(5, 0)], 100, [T1, T2], 1800) is None
    assert consistent_point([], 100, [T1], 1800) is None
