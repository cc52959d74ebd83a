"""Master terms on disk: every term has an epoch and the log offset where it began.

``<data-dir>/epoch`` holds one line per term, ``<epoch>-<start offset>``, after
two lines giving the entry count and a CRC32 of the entries (the layout of
RocketMQ's epochFileCheckpoint). It is replaced atomically, and the version it
replaces is kept as ``epoch.bak`` (as the state files under ``config/`` are). A
master starts a new term each time it starts or is promoted; a replica copies
its master's entries as the log it receives passes their start.

Damage never stops the broker: a damaged or missing file is read from its
``.bak`` with a WARNING. Where neither can be read, the terms are rebuilt from
what the commit log records of them, which is nothing (its records carry no
epoch): the whole log is taken as one term from its first offset, as a log from
before any term is. Invariant: a term number is never given twice by this
broker, so after reading the ``.bak`` (which may lack the newest term) or
rebuilding, the next term is numbered above every epoch still legible in either
file.

Comparing two brokers' entries finds where their logs stop being the same: the
newest term both hold with the same start, up to where the shorter of the two
runs of that term ends. A replica truncates its log to that point.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
import zlib
from collections.abc import Sequence

from ..store.atomic_file import read_if_exists, write_atomically, write_with_backup

log = logging.getLogger(__name__)

# An entry line that survived damage: its epoch is a number this broker may have used.
_ENTRY_LINE = re.compile(rb"^(\d{1,18})-\d{1,20}$", re.MULTILINE)


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


def _parse(raw: bytes) -> list[EpochEntry]:
    """The entries of one copy; ValueError saying what is wrong with it."""
    if not raw:
        raise ValueError("it is empty")
    try:
        count_line, crc_line, body = raw.decode().split("\n", 2)
    except (UnicodeDecodeError, ValueError):
        raise ValueError("it is not an epoch file (count, checksum, entries)") from None
    entries = []
    for line in body.splitlines():
        epoch, _, start = line.partition("-")
        entries.append(EpochEntry(int(epoch), int(start)))
    if len(entries) != int(count_line) or zlib.crc32(body.encode()) != int(crc_line):
        raise ValueError("count or checksum mismatch")
    _check_order(entries)
    return entries


def _legible_epochs(*copies: bytes | None) -> int:
    """The highest epoch in any entry line still readable in damaged copies, 0 if none."""
    return max(
        (int(m.group(1)) for raw in copies if raw for m in _ENTRY_LINE.finditer(raw)),
        default=0,
    )


class EpochFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self.backup_path = f"{path}.bak"
        self._entries: list[EpochEntry] = []
        # The next term is numbered above this (terms that may be lost with damage).
        self._floor = 0
        # Whether the main file holds a good version (a damaged one never becomes the .bak).
        self._main_good = True

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def last(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else 0

    @property
    def highest_used(self) -> int:
        """The highest epoch this broker may have used: its next term goes above it."""
        return max(self.epoch, self._floor)

    def load(self) -> None:
        """Read the terms from the file, its ``.bak``, or (neither readable) rebuild them."""
        raw = read_if_exists(self.path)
        backup = read_if_exists(self.backup_path)
        self._floor = 0
        self._main_good = True
        if raw is None and backup is None:
            self._entries = []
            return
        main_problem = "does not exist"
        if raw is not None:
            try:
                self._entries = _parse(raw)
                return
            except ValueError as exc:
                main_problem = f"is damaged ({exc})"
        self._main_good = False
        backup_problem = "does not exist"
        if backup is not None:
            try:
                entries = _parse(backup)
            except ValueError as exc:
                backup_problem = f"is damaged ({exc})"
            else:
                self._entries = entries
                # The damaged version may have held one more term than its .bak.
                self._floor = max(self.epoch + 1, _legible_epochs(raw))
                log.warning(
                    "epoch file %s %s; read its previous version %s instead (%d terms, "
                    "epoch %d); the next term this broker starts is numbered above %d",
                    self.path,
                    main_problem,
                    self.backup_path,
                    len(entries),
                    self.epoch,
                    self._floor,
                )
                return
        self._entries = []
        self._floor = _legible_epochs(raw, backup)
        log.warning(
            "epoch file %s %s and its backup %s %s; rebuilt from the commit log, whose "
            "records carry no master terms: the whole log is taken as one term from its "
            "first offset, and the next term this broker starts is numbered above %d. "
            "Every record in the log is kept. A replica that held later terms refuses to "
            "follow this broker, saying so; restore %s from a backup of the data directory "
            "if you have one",
            self.path,
            main_problem,
            self.backup_path,
            backup_problem,
            self._floor,
            self.path,
        )

    def _save(self) -> None:
        body = _entries_text(self._entries)
        text = f"{len(self._entries)}\n{zlib.crc32(body.encode())}\n{body}".encode()
        if self._main_good:
            write_with_backup(self.path, text, self.backup_path)
        else:
            # The damaged version is replaced without becoming the .bak.
            write_atomically(self.path, text)
            self._main_good = True

    def new_term(self, start_offset: int, *, above: int = 0) -> EpochEntry:
        """Begin this broker's term as master at ``start_offset``; returns its entry.

        The epoch is higher than every recorded one and than ``above`` (a term a
        replica heard of but whose log it never reached).
        """
        entry = EpochEntry(max(self.highest_used, above) + 1, start_offset)
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
