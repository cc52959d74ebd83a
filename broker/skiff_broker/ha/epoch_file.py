"""Master terms on disk: every term has an epoch and the log offset where it began.

``<data-dir>/epoch`` holds one line per term, ``<epoch>-<start offset>``, after
two lines giving the entry count and a CRC32 of the entries (the layout of
RocketMQ's epochFileCheckpoint). It is replaced atomically. A master starts a
new term each time it starts or is promoted; a replica copies its master's
entries as the log it receives passes their start.

Comparing two brokers' entries finds where their logs stop being the same: the
newest term both hold with the same start, up to where the shorter of the two
runs of that term ends. A replica truncates its log to that point.
"""

from __future__ import annotations

import dataclasses
import itertools
import zlib
from collections.abc import Sequence

from ..store.atomic_file import read_if_exists, write_atomically


class EpochFileError(Exception):
    """The epoch file is damaged; the message says what to do."""


@dataclasses.dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int

    def to_json(self) -> list[int]:
        return [self.epoch, self.start_offset]

    @classmethod
    def from_json(cls, value: object) -> EpochEntry:
        if (
            not isinstance(value, list)
            or len(value) != 2
            or not all(isinstance(v, int) and v >= 0 for v in value)
        ):
            raise ValueError(f"an epoch entry is [epoch, start offset], got {value!r}")
        return cls(value[0], value[1])


def _entries_text(entries: Sequence[EpochEntry]) -> str:
    return "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries)


def _check_order(entries: Sequence[EpochEntry]) -> None:
    for before, after in itertools.pairwise(entries):
        if after.epoch <= before.epoch or after.start_offset < before.start_offset:
            raise ValueError(f"epoch entries out of order: {before} then {after}")


class EpochFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self._entries: list[EpochEntry] = []

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def last(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else 0

    def load(self) -> None:
        raw = read_if_exists(self.path)
        if raw is None:
            self._entries = []
            return
        damaged = (
            f"epoch file {self.path} is damaged; restore it from a backup, or delete it "
            "together with the commit log so that this broker copies its master's log again"
        )
        try:
            count_line, crc_line, body = raw.decode().split("\n", 2)
            entries = []
            for line in body.splitlines():
                epoch, _, start = line.partition("-")
                entries.append(EpochEntry(int(epoch), int(start)))
            if len(entries) != int(count_line) or zlib.crc32(body.encode()) != int(crc_line):
                raise ValueError("count or checksum mismatch")
            _check_order(entries)
        except ValueError as exc:
            raise EpochFileError(f"{damaged} ({exc})") from None
        self._entries = entries

    def _save(self) -> None:
        body = _entries_text(self._entries)
        text = f"{len(self._entries)}\n{zlib.crc32(body.encode())}\n{body}"
        write_atomically(self.path, text.encode())

    def new_term(self, start_offset: int, *, above: int = 0) -> EpochEntry:
        """Begin this broker's term as master at ``start_offset``; returns its entry.

        The epoch is higher than every recorded one and than ``above`` (a term a
        replica heard of but whose log it never reached).
        """
        entry = EpochEntry(max(self.epoch, above) + 1, start_offset)
        self._entries.append(entry)
        self._save()
        return entry

    def replace(self, entries: Sequence[EpochEntry]) -> None:
        """Take another broker's entries (a replica following its master)."""
        entries = list(entries)
        _check_order(entries)
        if entries != self._entries:
            self._entries = entries
            self._save()

    def truncate_after(self, offset: int) -> None:
        """Forget terms that start at or past ``offset`` (their log was cut away)."""
        kept = [e for e in self._entries if e.start_offset < offset]
        if kept != self._entries:
            self._entries = kept
            self._save()


def end_of(entries: Sequence[EpochEntry], index: int, log_end: int) -> int:
    """Where term ``entries[index]`` ends in a log that ends at ``log_end``."""
    following = entries[index + 1].start_offset if index + 1 < len(entries) else log_end
    return min(following, log_end)


def consistent_point(
    mine: Sequence[EpochEntry], my_end: int, theirs: Sequence[EpochEntry], their_end: int
) -> int | None:
    """The offset up to which two logs are the same, or None if they share no term.

    An empty log agrees with every log up to its start (0).
    """
    if my_end == 0:
        return 0
    their_terms = {
        entry.epoch: (entry.start_offset, end_of(theirs, i, their_end))
        for i, entry in enumerate(theirs)
    }
    for index in range(len(mine) - 1, -1, -1):
        entry = mine[index]
        theirs_of_epoch = their_terms.get(entry.epoch)
        if theirs_of_epoch is None or theirs_of_epoch[0] != entry.start_offset:
            continue
        if entry.start_offset > my_end:
            continue
        return min(end_of(mine, index, my_end), theirs_of_epoch[1])
    return None
