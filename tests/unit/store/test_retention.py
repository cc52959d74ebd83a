"""Retention and disk space: age-based deletion, disk-use ratios and a really full disk.

Everything runs on real files. The disk-space tests mount a small tmpfs (root
only) so that the disk really fills up and ``statvfs`` reports real numbers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import skiff_broker
from skiff_broker.store.config import FlushType, StoreConfig
from skiff_broker.store.consume_queue import UNIT_SIZE
from skiff_broker.store.mapped_file import segment_name
from skiff_broker.store.message import Message, StoredMessage
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.results import GetStatus, PutResult, PutStatus
from skiff_broker.store.retention import RetentionService, is_delete_hour

KiB = 1024
MiB = 1024 * KiB
HOUR = 3600.0
TOPIC = "orders"
DEADLINE = 15.0


# -- helpers -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Sent:
    """What a producer was told about one acknowledged message."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    body: bytes
    key: str


def at_local_hour(hour: int) -> float:
    """A timestamp whose local-time hour is ``hour`` (for an injected clock)."""
    t = time.localtime()
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, hour, 30, 0, 0, 0, -1))


def base_config(data_dir: Path, **overrides: object) -> StoreConfig:
    config = StoreConfig(
        data_dir=str(data_dir),
        commit_log_file_size=64 * KiB,
        max_message_size=16 * KiB,
        consume_queue_units_per_file=20,
        max_hash_slot_num=100,
        max_index_num=50,
        # The tests run retention steps themselves; the background one never fires.
        clean_resource_interval=HOUR,
        delete_commit_log_files_interval=0.0,
        # The disk under tmp_path may be any amount full: keep the ratios out of
        # the age-based tests.
        disk_max_used_space_ratio=100,
        disk_space_clean_forcibly_ratio=1.0,
        disk_space_warning_level_ratio=1.0,
    )
    for name, value in overrides.items():
        setattr(config, name, value)
    return config


class Producer:
    """Puts messages with distinct bodies and remembers every acknowledged one."""

    def __init__(self, store: MessageStore, body_size: int, seed: int = 7) -> None:
        self.store = store
        self.body_size = body_size
        self.rng = random.Random(seed)
        self.sent: list[Sent] = []
        self.count = 0

    def batch(self, queue_id: int, n: int) -> list[Message]:
        messages = []
        for _ in range(n):
            self.count += 1
            messages.append(
                Message(
                    TOPIC,
                    self.rng.randbytes(self.body_size),
                    queue_id=queue_id,
                    properties={"KEYS": f"key-{self.count}", "TAGS": "tagA"},
                )
            )
        return messages

    def put(self, queue_id: int, n: int = 1) -> PutResult:
        messages = self.batch(queue_id, n)
        result = self.store.put_messages(messages)
        if result.ok:
            self.record(messages, result)
        return result

    def record(self, messages: list[Message], result: PutResult) -> None:
        append = result.append
        assert append is not None
        for m, physical, queue_offset, size in zip(
            messages, append.physical_offsets, append.queue_offsets, append.sizes, strict=True
        ):
            self.sent.append(
                Sent(
                    m.topic, m.queue_id, queue_offset, physical, size, m.body, m.properties["KEYS"]
                )
            )

    def fill_segments(self, segments: int, queues: int = 2, batch: int = 4) -> None:
        """Put until the commit log has ``segments`` segments, the newest holding every queue."""
        queue_id = 0
        while len(self.store.commit_log.queue.files) < segments:
            result = self.put(queue_id, batch)
            assert result.ok, result.reason
            queue_id = (queue_id + 1) % queues
        for queue_id in range(queues):
            result = self.put(queue_id, batch)
            assert result.ok, result.reason
        assert len(self.store.commit_log.queue.files) == segments


def wait_readable(store: MessageStore, sent: list[Sent]) -> None:
    """Wait until every acknowledged record has reached the file and the consume queues."""
    end = max(s.physical_offset + s.size for s in sent)
    deadline = time.monotonic() + DEADLINE
    while store.commit_log.max_offset < end:
        assert time.monotonic() < deadline, "acknowledged messages never became readable"
        time.sleep(0.01)
    assert store.wait_dispatched(DEADLINE)


def read_queue(store: MessageStore, queue_id: int, start: int) -> list[StoredMessage]:
    messages: list[StoredMessage] = []
    offset = start
    while True:
        got = store.get_messages(TOPIC, queue_id, offset, 64)
        if got.status is GetStatus.OFFSET_OVERFLOW_ONE:
            return messages
        assert got.status is GetStatus.FOUND, got.status
        messages.extend(got.messages)
        offset = got.next_offset


def assert_readable(store: MessageStore, expected: list[Sent]) -> None:
    """Exactly ``expected`` is readable from each queue's minimum offset, byte for byte."""
    for queue_id in sorted({s.queue_id for s in expected}):
        want = [s for s in expected if s.queue_id == queue_id]
        start = store.min_offset(TOPIC, queue_id)
        got = read_queue(store, queue_id, start)
        assert [m.queue_offset for m in got] == [s.queue_offset for s in want]
        for m, s in zip(got, want, strict=True):
            assert m.body == s.body
            assert m.physical_offset == s.physical_offset
            assert m.store_size == s.size
            assert m.topic == s.topic
            assert m.keys == [s.key]


def retention_for(store: MessageStore, hour: int) -> RetentionService:
    """A retention service wired to ``store`` whose clock always says ``hour``."""
    now = at_local_hour(hour)
    return store.make_retention_service(clock=lambda: now)


def set_age(path: str, hours: float) -> None:
    then = time.time() - hours * HOUR
    os.utime(path, (then, then))


def cq_files(store: MessageStore, queue_id: int) -> list[str]:
    return sorted(os.listdir(os.path.join(store.config.consume_queue_dir, TOPIC, str(queue_id))))


def index_files(store: MessageStore) -> list[str]:
    """Index files by name, leaving out space reserved for the next one."""
    return sorted(n for n in os.listdir(store.config.index_dir) if not n.endswith(".reserved"))


# -- delete hours --------------------------------------------------------------


@pytest.mark.parametrize(
    ("delete_when", "hours"),
    [
        ("04", {4}),
        ("4", {4}),
        ("04;16", {4, 16}),
        (" 04 ; 16 ", {4, 16}),
        ("00", {0}),
        ("23", {23}),
        ("", set()),
        ("junk", set()),
        ("junk;05;;x7", {5}),
        ("-4;4a;4.0;0x4", set()),
        ("24;99", set()),
        # Digits that str.isdigit() accepts but int() does not.
        ("\u00b2;06", {6}),
    ],
)
def test_is_delete_hour(delete_when: str, hours: set[int]) -> None:
    assert {h for h in range(24) if is_delete_hour(delete_when, h)} == hours


# -- age-based deletion --------------------------------------------------------


def test_old_segments_are_deleted_at_the_delete_hour(tmp_path: Path) -> None:
    config = base_config(tmp_path / "store", flush_type=FlushType.SYNC_FLUSH, delete_when="04")
    with MessageStore(config) as store:
        producer = Producer(store, body_size=900)
        producer.fill_segments(5)
        wait_readable(store, producer.sent)
        segments = list(store.commit_log.queue.files)
        newest = segments[-1]
        for mf in segments[:-1]:
            set_age(mf.path, config.file_reserved_time_hours + 1)
        index_before = {os.path.basename(f.path): f.end_phy_offset for f in store.index.files}
        assert sorted(index_before) == index_files(store)
        cq_before = {q: cq_files(store, q) for q in (0, 1)}
        assert len(index_before) > 2 and all(len(names) > 2 for names in cq_before.values())

        retention_for(store, hour=4).step()

        # Commit log: every old segment is gone, the newest stays.
        for mf in segments[:-1]:
            assert not os.path.exists(mf.path)
        assert os.path.exists(newest.path)
        min_offset = newest.file_from_offset
        assert store.commit_log.min_offset == min_offset
        assert store.stats().commit_log_min_offset == min_offset

        kept = [s for s in producer.sent if s.physical_offset >= min_offset]
        gone = [s for s in producer.sent if s.physical_offset < min_offset]
        assert kept and gone
        for queue_id in (0, 1):
            new_min = min(s.queue_offset for s in kept if s.queue_id == queue_id)
            assert new_min > 0
            # A consumer at offset 0 is told where the queue now starts.
            got = store.get_messages(TOPIC, queue_id, 0, 32)
            assert got.status is GetStatus.OFFSET_TOO_SMALL
            assert got.min_offset == new_min
            assert got.next_offset == new_min
            assert store.min_offset(TOPIC, queue_id) == new_min
            # Consume-queue files holding only deleted records are gone; the file
            # holding the new minimum is the first one left.
            first_kept = new_min // config.consume_queue_units_per_file
            unit_bytes = config.consume_queue_units_per_file * UNIT_SIZE
            assert cq_files(store, queue_id) == [
                name for name in cq_before[queue_id] if int(name) >= first_kept * unit_bytes
            ]
            assert cq_files(store, queue_id)[0] == segment_name(first_kept * unit_bytes)

        # Index files that only point below the new minimum are deleted.
        expected_index = sorted(n for n, end in index_before.items() if end >= min_offset)
        assert 0 < len(expected_index) < len(index_before)
        assert index_files(store) == expected_index
        assert sorted(os.path.basename(f.path) for f in store.index.files) == expected_index
        assert store.query_by_key(TOPIC, gone[0].key) == []
        assert [m.body for m in store.query_by_key(TOPIC, kept[0].key)] == [kept[0].body]

        # Everything in the kept segment is still there, byte for byte.
        assert_readable(store, kept)
        for s in kept:
            message = store.get_message_at(s.physical_offset, s.size)
            assert message is not None and message.body == s.body

        # The store keeps taking writes after the deletion.
        result = producer.put(0, 1)
        assert result.ok, result.reason
        wait_readable(store, producer.sent)
        assert_readable(store, [s for s in producer.sent if s.physical_offset >= min_offset])


def test_segments_younger_than_the_reserved_time_are_kept(tmp_path: Path) -> None:
    config = base_config(tmp_path / "store", flush_type=FlushType.SYNC_FLUSH, delete_when="04")
    with MessageStore(config) as store:
        producer = Producer(store, body_size=900)
        producer.fill_segments(5)
        wait_readable(store, producer.sent)
        segments = list(store.commit_log.queue.files)
        reserved = config.file_reserved_time_hours
        # The third segment is one hour short of expiry: it and everything after
        # it stay, even an older segment behind it (deletion never leaves holes).
        ages = [reserved + 1, reserved + 1, reserved - 1, reserved + 5]
        for mf, age in zip(segments[:-1], ages, strict=True):
            set_age(mf.path, age)

        retention_for(store, hour=4).step()

        assert [os.path.exists(mf.path) for mf in segments] == [False, False, True, True, True]
        assert store.commit_log.min_offset == segments[2].file_from_offset
        assert_readable(
            store, [s for s in producer.sent if s.physical_offset >= segments[2].file_from_offset]
        )


def test_nothing_is_deleted_outside_the_delete_hour_unless_asked(tmp_path: Path) -> None:
    config = base_config(tmp_path / "store", flush_type=FlushType.SYNC_FLUSH, delete_when="04;16")
    with MessageStore(config) as store:
        producer = Producer(store, body_size=900)
        producer.fill_segments(3)
        wait_readable(store, producer.sent)
        segments = list(store.commit_log.queue.files)
        for mf in segments[:-1]:
            set_age(mf.path, config.file_reserved_time_hours + 1)

        service = retention_for(store, hour=5)
        service.step()
        assert all(os.path.exists(mf.path) for mf in segments)
        assert store.commit_log.min_offset == 0
        assert store.get_messages(TOPIC, 0, 0, 1).status is GetStatus.FOUND
        assert_readable(store, producer.sent)

        # An operator's manual request deletes expired segments at any hour, once.
        service.manual_delete = True
        service.step()
        assert [os.path.exists(mf.path) for mf in segments] == [False, False, True]
        assert not service.manual_delete
        assert store.get_messages(TOPIC, 0, 0, 1).status is GetStatus.OFFSET_TOO_SMALL


def test_the_store_runs_its_own_retention_at_the_configured_hour(tmp_path: Path) -> None:
    hour = time.localtime().tm_hour
    # The next hour too, in case the clock ticks over during the test.
    delete_when = f"{hour:02d};{(hour + 1) % 24:02d}"
    config = base_config(
        tmp_path / "store", flush_type=FlushType.SYNC_FLUSH, delete_when=delete_when
    )
    with MessageStore(config) as store:
        producer = Producer(store, body_size=900)
        producer.fill_segments(3)
        wait_readable(store, producer.sent)
        segments = list(store.commit_log.queue.files)
        for mf in segments[:-1]:
            set_age(mf.path, config.file_reserved_time_hours + 1)

        store.run_retention()

        assert [os.path.exists(mf.path) for mf in segments] == [False, False, True]
        min_offset = segments[-1].file_from_offset
        assert store.commit_log.min_offset == min_offset
        assert_readable(store, [s for s in producer.sent if s.physical_offset >= min_offset])


# -- a real, small disk ----------------------------------------------------------


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs, so the disk really fills up."""
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for the full-disk tests needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the full-disk tests: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        # A process that just died may hold the mount for a moment.
        deadline = time.monotonic() + 5.0
        while subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                subprocess.run(["umount", "-l", str(mount_point)], check=True)
                break
            time.sleep(0.1)


def tmpfs_config(data_dir: Path, **overrides: object) -> StoreConfig:
    config = StoreConfig(
        data_dir=str(data_dir),
        commit_log_file_size=1 * MiB,
        max_message_size=64 * KiB,
        consume_queue_units_per_file=1000,
        max_hash_slot_num=1000,
        max_index_num=4000,
        transient_store_pool_size=3,
        clean_resource_interval=HOUR,
        delete_commit_log_files_interval=0.0,
    )
    for name, value in overrides.items():
        setattr(config, name, value)
    config.validate()
    return config


def use_ratio(path: Path) -> float:
    st = os.statvfs(path)
    used = st.f_blocks - st.f_bfree
    return used / (used + st.f_bavail)


def make_filler(path: Path, size: int) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)


def filler_to_reach(mount: Path, target_ratio: float) -> int:
    """Bytes that take the file system's use to ``target_ratio`` (in whole blocks)."""
    st = os.statvfs(mount)
    used_blocks = st.f_blocks - st.f_bfree
    blocks = int(target_ratio * (used_blocks + st.f_bavail)) - used_blocks
    assert blocks > 0, "the file system is already past the target"
    return blocks * st.f_frsize


def wait_prepared_segment(store: MessageStore) -> None:
    """Let the allocator finish preparing the next segment, so disk use holds still."""
    directory = store.config.commit_log_dir
    deadline = time.monotonic() + DEADLINE
    while True:
        names = os.listdir(directory)
        if not any(n.endswith(".tmp") for n in names) and len(names) > len(
            store.commit_log.queue.files
        ):
            return
        assert time.monotonic() < deadline, f"the next segment was never prepared: {names}"
        time.sleep(0.01)


def assert_fully_allocated(data_dir: Path) -> None:
    """Every data file has real blocks behind its whole length.

    Writes go through mmap: a hole hit on a full disk would be SIGBUS, not an error.
    """
    for root, _, names in os.walk(data_dir):
        for name in names:
            if name in ("lock", "abort"):
                continue
            st = os.stat(os.path.join(root, name))
            assert st.st_blocks * 512 >= st.st_size, f"{name} is sparse"


def full_disk_config(mount: Path, mode: str) -> StoreConfig:
    return tmpfs_config(
        mount / "store",
        flush_type=FlushType.SYNC_FLUSH if mode == "sync_flush" else FlushType.ASYNC_FLUSH,
        transient_store_pool_enable=mode == "transient_pool",
        # Ratios out of the way: only the real ENOSPC stops writes here.
        disk_max_used_space_ratio=100,
        disk_space_clean_forcibly_ratio=1.0,
        disk_space_warning_level_ratio=1.0,
    )


def full_disk_scenario(mount: str, mode: str, report: str) -> None:
    """The broker's side of the full-disk test; runs in a child process.

    Fills the disk until a put answers DISK_FULL, checks that reads still work,
    frees space and checks that writes resume. Writes what was acknowledged to
    ``report`` as JSON.
    """
    mount_point = Path(mount)
    config = full_disk_config(mount_point, mode)
    filler = mount_point / "filler"
    make_filler(filler, 3 * MiB)
    with MessageStore(config) as store:
        producer = Producer(store, body_size=4 * KiB)
        queue_id = 0
        # The tmpfs holds a handful of segments: the disk must fill well before this.
        for _ in range(5000):
            result = producer.put(queue_id, 2)
            if not result.ok:
                break
            queue_id = (queue_id + 1) % 2
        else:
            raise AssertionError("the disk never filled up")
        assert result.status is PutStatus.DISK_FULL, result.reason
        assert "free disk space" in result.reason, result.reason
        assert config.commit_log_dir in result.reason, result.reason
        assert len(producer.sent) > 500
        # While the store backs off, writes are refused at once with the same reason.
        again = producer.put(0, 1)
        assert again.status is PutStatus.DISK_FULL
        assert "free disk space" in again.reason
        stats = store.stats()
        assert not stats.writable and "free disk space" in stats.refusal

        # Reads keep working: every acknowledged message is there, byte for byte.
        wait_readable(store, producer.sent)
        assert_readable(store, producer.sent)
        last = producer.sent[-1]
        assert [m.body for m in store.query_by_key(TOPIC, last.key)] == [last.body]
        assert_fully_allocated(Path(config.data_dir))

        # Freeing space lets writes resume (after the store's allocation back-off).
        os.unlink(filler)
        deadline = time.monotonic() + DEADLINE
        while True:
            result = producer.put(1, 2)
            if result.ok:
                break
            assert result.status is PutStatus.DISK_FULL, result.reason
            assert time.monotonic() < deadline, f"writes never resumed: {result.reason}"
            time.sleep(0.05)
        for _ in range(20):
            result = producer.put(0, 2)
            assert result.ok, result.reason
        assert store.stats().writable
        wait_readable(store, producer.sent)
        assert_readable(store, producer.sent)
    with open(report, "w") as f:
        json.dump(
            [
                [s.queue_id, s.queue_offset, s.physical_offset, s.size, s.body.hex(), s.key]
                for s in producer.sent
            ],
            f,
        )


_RUN_SCENARIO = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("retention_scenario", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
module.full_disk_scenario(*sys.argv[2:])
"""


@pytest.mark.parametrize("mode", ["sync_flush", "async_flush", "transient_pool"])
def test_a_full_disk_refuses_writes_keeps_reads_and_recovers(
    tmpfs: Path, tmp_path: Path, mode: str
) -> None:
    # The broker runs in its own process: a write into an unallocated page of a
    # full disk would kill it with SIGBUS, which must show up as a failure here.
    report = tmp_path / "acknowledged.json"
    env = dict(os.environ)
    broker_dir = str(Path(skiff_broker.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [broker_dir, env.get("PYTHONPATH")]))
    child = subprocess.run(
        [sys.executable, "-c", _RUN_SCENARIO, __file__, str(tmpfs), mode, str(report)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if child.returncode < 0:
        pytest.fail(
            f"the broker process died with {signal.Signals(-child.returncode).name}:\n"
            f"{child.stderr}"
        )
    assert child.returncode == 0, child.stderr

    # Everything acknowledged survives the broker's restart, byte for byte.
    acknowledged = [
        Sent(TOPIC, queue_id, queue_offset, physical, size, bytes.fromhex(body), key)
        for queue_id, queue_offset, physical, size, body, key in json.loads(report.read_text())
    ]
    assert len(acknowledged) > 500
    with MessageStore(full_disk_config(tmpfs, mode)) as store:
        assert store.clean_start
        assert_readable(store, acknowledged)


def test_disk_use_past_the_warning_ratio_refuses_writes_until_freed(tmpfs: Path) -> None:
    # RocketMQ's default ratios.
    config = tmpfs_config(tmpfs / "store", flush_type=FlushType.SYNC_FLUSH)
    assert config.disk_space_warning_level_ratio == 0.90
    with MessageStore(config) as store:
        producer = Producer(store, body_size=4 * KiB)
        for i in range(40):
            assert producer.put(i % 2, 2).ok
        wait_prepared_segment(store)
        assert use_ratio(tmpfs) < config.disk_space_warning_level_ratio
        assert store.check_disk().full is False
        assert store.stats().writable

        filler = tmpfs / "filler"
        make_filler(filler, filler_to_reach(tmpfs, 0.95))
        ratio = use_ratio(tmpfs)
        assert ratio > config.disk_space_warning_level_ratio
        state = store.check_disk()
        assert state.full and state.ratio == ratio

        result = producer.put(0, 1)
        assert result.status is PutStatus.DISK_FULL
        assert f"disk {ratio:.0%} full" in result.reason
        assert "limit 90%" in result.reason
        assert "freed" in result.reason
        assert not store.stats().writable
        # Reads keep working.
        wait_readable(store, producer.sent)
        assert_readable(store, producer.sent)

        os.unlink(filler)
        # Still refused until the next check sees the freed space.
        assert producer.put(0, 1).status is PutStatus.DISK_FULL
        state = store.check_disk()
        assert not state.full and state.ratio < config.disk_space_warning_level_ratio
        result = producer.put(0, 1)
        assert result.ok, result.reason
        assert store.stats().writable
        wait_readable(store, producer.sent)
        assert_readable(store, producer.sent)


@pytest.mark.parametrize(
    ("crossed", "forcibly", "warning", "target"),
    [
        # RocketMQ's defaults: forcible cleaning starts below the refusal level.
        ("clean_forcibly", 0.85, 0.90, 0.875),
        # Refusing writes also cleans regardless of age, even if the forcible
        # ratio is set out of reach; otherwise writes would wait days for files to age.
        ("warning_level", 1.0, 0.80, 0.85),
    ],
)
def test_disk_use_past_the_cleaning_ratios_deletes_regardless_of_age(
    tmpfs: Path, crossed: str, forcibly: float, warning: float, target: float
) -> None:
    config = tmpfs_config(
        tmpfs / "store",
        flush_type=FlushType.ASYNC_FLUSH,
        delete_when="04",
        clean_file_forcibly_enable=True,
        disk_space_clean_forcibly_ratio=forcibly,
        disk_space_warning_level_ratio=warning,
        # The flusher never runs on its own: the test decides what is flushed.
        flush_interval_commit_log=HOUR,
        flush_commit_log_thorough_interval=HOUR,
    )
    with MessageStore(config) as store:
        producer = Producer(store, body_size=4 * KiB)
        producer.fill_segments(4, batch=2)
        for _ in range(10):
            assert producer.put(0, 2).ok
        wait_readable(store, producer.sent)
        wait_prepared_segment(store)
        segments = list(store.commit_log.queue.files)
        assert len(segments) == 4
        assert store.stats().flushed_offset == 0
        assert use_ratio(tmpfs) < min(forcibly, warning)

        filler = tmpfs / "filler"
        make_filler(filler, filler_to_reach(tmpfs, target))
        ratio = use_ratio(tmpfs)
        if crossed == "clean_forcibly":
            assert forcibly < ratio < warning
        else:
            assert warning < ratio < forcibly
        # Fresh segments, and not the delete hour: only the disk use can justify deleting.
        service = retention_for(store, hour=12)

        # Nothing is flushed yet: nothing may go, however full the disk.
        service.step()
        assert all(os.path.exists(mf.path) for mf in segments)
        assert store.commit_log.min_offset == 0
        refused = producer.put(1, 1)
        if crossed == "warning_level":
            assert refused.status is PutStatus.DISK_FULL, refused.reason
        else:
            assert refused.ok, refused.reason

        store.request_flush()
        deadline = time.monotonic() + DEADLINE
        while store.stats().flushed_offset < segments[-1].file_from_offset:
            assert time.monotonic() < deadline, "the commit log was never flushed"
            time.sleep(0.01)

        service.step()

        # The oldest segments went; the newest one, still being written, stays.
        assert [os.path.exists(mf.path) for mf in segments] == [False, False, False, True]
        min_offset = segments[-1].file_from_offset
        assert store.commit_log.min_offset == min_offset
        assert use_ratio(tmpfs) < ratio - 2 * MiB / (8 * MiB)
        assert store.stats().disk_use_ratio < min(forcibly, warning)
        assert store.get_messages(TOPIC, 0, 0, 1).status is GetStatus.OFFSET_TOO_SMALL
        assert_readable(store, [s for s in producer.sent if s.physical_offset >= min_offset])
        # The step re-checked the disk: writes are accepted again.
        result = producer.put(1, 1)
        assert result.ok, result.reason
        assert store.stats().writable


# -- space for consume queues and index; keeping or deleting unexpired messages --


def wait_flushed_to(store: MessageStore, offset: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while store.stats().flushed_offset < offset:
        assert time.monotonic() < deadline, "the commit log was never flushed"
        time.sleep(0.01)


def test_a_consume_queue_file_that_cannot_be_allocated_refuses_the_write_unstored(
    tmpfs: Path,
) -> None:
    # Each consume-queue file takes 2 MB of the 8 MiB disk.
    config = tmpfs_config(
        tmpfs / "store",
        consume_queue_units_per_file=100_000,
        disk_max_used_space_ratio=100,
        disk_space_clean_forcibly_ratio=1.0,
        disk_space_warning_level_ratio=1.0,
    )
    with MessageStore(config) as store:
        producer = Producer(store, body_size=1 * KiB)
        for _ in range(10):
            assert producer.put(0, 2).ok
        wait_prepared_segment(store)
        filler = tmpfs / "filler"
        # Room for appends to the segment already allocated, none for another 2 MB file.
        st = os.statvfs(tmpfs)
        make_filler(filler, st.f_bavail * st.f_frsize - 1 * MiB)
        log_end = store.commit_log.queue.max_wrote_offset

        refused = producer.put(1, 2)
        assert refused.status is PutStatus.DISK_FULL, refused.reason
        assert "consume-queue file" in refused.reason
        assert "--consume-queue-file-entries" in refused.reason
        assert "not stored" in refused.reason
        # Nothing of it is in the log: no acknowledged-looking record without a queue.
        assert store.commit_log.queue.max_wrote_offset == log_end
        assert store.max_offset(TOPIC, 1) == 0
        wait_readable(store, producer.sent)
        assert_readable(store, producer.sent)

        os.unlink(filler)
        deadline = time.monotonic() + DEADLINE
        while not (result := producer.put(1, 2)).ok:
            assert result.status is PutStatus.DISK_FULL, result.reason
            assert time.monotonic() < deadline, f"writes never resumed: {result.reason}"
            time.sleep(0.05)
        wait_readable(store, producer.sent)
        assert_readable(store, producer.sent)


def test_by_default_a_full_disk_keeps_unconsumed_messages_and_refuses_writes(
    tmpfs: Path,
) -> None:
    config = tmpfs_config(tmpfs / "store")
    assert not config.clean_file_forcibly_enable
    with MessageStore(config) as store:
        producer = Producer(store, body_size=4 * KiB)
        producer.fill_segments(4, batch=2)
        wait_readable(store, producer.sent)
        wait_prepared_segment(store)
        segments = list(store.commit_log.queue.files)
        wait_flushed_to(store, segments[-1].file_from_offset)
        make_filler(tmpfs / "filler", filler_to_reach(tmpfs, 0.95))

        # Fresh segments, not the delete hour, past every ratio: nothing unexpired goes.
        retention_for(store, hour=12).step()
        assert all(os.path.exists(mf.path) for mf in segments)
        refused = producer.put(0, 1)
        assert refused.status is PutStatus.DISK_FULL, refused.reason
        assert "limit 90%" in refused.reason
        assert "--clean-file-forcibly" in refused.reason
        assert "larger disk" in refused.reason
        assert store.commit_log.min_offset == 0
        assert_readable(store, producer.sent)


def test_by_default_a_full_disk_deletes_early_only_what_every_group_consumed(
    tmpfs: Path,
) -> None:
    config = tmpfs_config(tmpfs / "store")
    with MessageStore(config) as store:
        producer = Producer(store, body_size=4 * KiB)
        producer.fill_segments(4, batch=2)
        wait_readable(store, producer.sent)
        wait_prepared_segment(store)
        segments = list(store.commit_log.queue.files)
        wait_flushed_to(store, segments[-1].file_from_offset)
        # The first message of queue 1 in the third segment is the oldest one that
        # "late" has not consumed; "done" read everything.
        third = segments[2].file_from_offset
        first_unread = min(
            (s for s in producer.sent if s.queue_id == 1 and s.physical_offset >= third),
            key=lambda s: s.queue_offset,
        )
        late = {0: store.max_offset(TOPIC, 0), 1: first_unread.queue_offset}
        store.consumer_progress = lambda topic, queue_id: {
            "done": store.max_offset(topic, queue_id),
            "late": late[queue_id],
        }
        make_filler(tmpfs / "filler", filler_to_reach(tmpfs, 0.95))

        retention_for(store, hour=12).step()

        # The two segments every group had read went; the one with "late"'s next
        # message stays, and so does everything after it.
        assert [os.path.exists(mf.path) for mf in segments] == [False, False, True, True]
        assert store.commit_log.min_offset == third
        assert_readable(store, [s for s in producer.sent if s.physical_offset >= third])

        # A topic no group consumes has read nothing: nothing more may go early.
        store.consumer_progress = lambda topic, queue_id: {}
        retention_for(store, hour=12).step()
        assert store.commit_log.min_offset == third


def test_deleting_unexpired_messages_warns_with_counts_per_topic_and_unread_groups(
    tmpfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # RocketMQ's default, Skiff's opt-in.
    config = tmpfs_config(tmpfs / "store", clean_file_forcibly_enable=True)
    with MessageStore(config) as store:
        producer = Producer(store, body_size=4 * KiB)
        producer.fill_segments(4, batch=2)
        wait_readable(store, producer.sent)
        wait_prepared_segment(store)
        segments = list(store.commit_log.queue.files)
        wait_flushed_to(store, segments[-1].file_from_offset)
        # "done" read all of queue 0 and 1; "late" read only the first two of queue 0.
        store.consumer_progress = lambda topic, queue_id: {
            "done": store.max_offset(topic, queue_id),
            "late": 2 if queue_id == 0 else 0,
        }
        make_filler(tmpfs / "filler", filler_to_reach(tmpfs, 0.875))

        with caplog.at_level("WARNING", logger="skiff_broker.store.message_store"):
            retention_for(store, hour=12).step()

        min_offset = segments[-1].file_from_offset
        assert store.commit_log.min_offset == min_offset
        gone = [s for s in producer.sent if s.physical_offset < min_offset]
        unread = [s for s in gone if s.queue_id == 1 or s.queue_offset >= 2]
        [record] = [r for r in caplog.records if hasattr(r, "deleted_unconsumed")]
        assert record.levelname == "WARNING"
        assert record.deleted_unconsumed == {
            TOPIC: {
                "messages": len(unread),
                "bytes": sum(s.size for s in unread),
                "unread_by": ["late"],
            }
        }
        assert f"{TOPIC}: {len(unread)} messages" in record.getMessage()
        assert "--no-clean-file-forcibly" in record.getMessage()
        assert_readable(store, [s for s in producer.sent if s.physical_offset >= min_offset])
