"""The replica book: replicas' client endpoints survive a restart and damage stops the start."""

from __future__ import annotations

from pathlib import Path

import pytest

from skiff_broker.ha.replica_book import ReplicaBook, ReplicaBookError


def test_endpoints_survive_a_restart_and_a_moved_replica_replaces_its_entry(
    tmp_path: Path,
) -> None:
    book = ReplicaBook(str(tmp_path / "replicas"))
    book.load()
    assert book.endpoints == {}
    assert book.remember("a@host-1:/data", "10.0.0.1:8081")
    assert not book.remember("a@host-1:/data", "10.0.0.1:8081")
    assert book.remember("a@host-2:/data", "10.0.0.2:8081")
    assert book.remember("a@host-1:/data", "10.0.0.9:8081")

    again = ReplicaBook(book.path)
    again.load()
    assert again.endpoints == {"a@host-1:/data": "10.0.0.9:8081", "a@host-2:/data": "10.0.0.2:8081"}


def test_a_replica_that_reports_no_endpoint_is_not_written(tmp_path: Path) -> None:
    book = ReplicaBook(str(tmp_path / "replicas"))
    assert not book.remember("old-replica", "")
    assert not (tmp_path / "replicas").exists()


@pytest.mark.parametrize("content", [b"{", b"[]", b'{"replicas": {"a": 1}}'])
def test_a_damaged_file_stops_the_start_and_says_what_to_do(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "replicas").write_bytes(content)
    with pytest.raises(ReplicaBookError, match=r"is damaged.*delete it"):
        ReplicaBook(str(tmp_path / "replicas")).load()
