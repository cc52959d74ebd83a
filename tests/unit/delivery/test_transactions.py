"""TransactionService on a real MessageStore: half messages, ends, checks, restarts.

``send_check`` is the one seam: in the broker it writes a telemetry command to a
producer; here a list records what the service asked (there is no gRPC here;
tests/integration/test_client_delay_transaction.py runs the real path). A crash
is left on disk as SIGKILL leaves it: all writes in the files, the ``abort`` file
present, and ``config/transactionState.json`` as the last persist wrote it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support.store_settings import small_store

from skiff_broker.delivery.transactions import TransactionRefused, TransactionService
from skiff_broker.messaging.status import Code, RequestError, transaction_refused
from skiff_broker.store.checkpoint import Checkpoint
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import TRANSACTION_COMMIT_TYPE, Message, StoredMessage
from skiff_broker.store.message_store import MessageStore
from skiff_broker.wire import property_names as prop

TOPIC = "payments"
QUEUE = 1
SMALL_STORE = small_store()
# The background checker never runs within a test; rounds are started by hand.
NEVER_MS = 3_600_000


class Running:
    """A store and a transaction service on one data directory."""

    def __init__(self, data_dir: Path, *, timeout_ms: int = 0, check_max: int = 3) -> None:
        self.config = StoreConfig(data_dir=str(data_dir), **SMALL_STORE)
        self.state_path = str(data_dir / "config" / "transactionState.json")
        self.store = MessageStore(self.config)
        self.store.start()
        self.checks: list[tuple[StoredMessage, str]] = []
        self.transactions = TransactionService(
            self.store,
            self.state_path,
            timeout_ms=timeout_ms,
            check_interval_ms=NEVER_MS,
            check_max=check_max,
            send_check=self._record_check,
        )
        self.transactions.start()

    def _record_check(self, message: StoredMessage, transaction_id: str) -> bool:
        self.checks.append((message, transaction_id))
        return True

    def prepare(self, message: Message) -> str:
        result, transaction_id = asyncio.run(
            self.transactions.prepare(message, producer_group=TOPIC)
        )
        assert result.ok, result.reason
        assert transaction_id
        return transaction_id

    def end(self, message: Message, transaction_id: str, *, commit: bool, **kw: Any) -> None:
        asyncio.run(
            self.transactions.end(
                topic=kw.get("topic", message.topic),
                message_id=kw.get("message_id", message.properties[prop.UNIQ_KEY]),
                transaction_id=transaction_id,
                commit=commit,
                from_check=kw.get("from_check", False),
            )
        )

    def visible(self) -> list[StoredMessage]:
        self.store.wait_dispatched()
        return self.store.get_messages(TOPIC, QUEUE, 0, 100).messages

    def stop(self) -> None:
        self.transactions.stop()
        self.store.shutdown()

    def crash_to(self, state_snapshot: bytes) -> None:
        """Stop and leave the directory as a crash right after ``state_snapshot`` was saved."""
        self.stop()
        Path(self.state_path).write_bytes(state_snapshot)
        Path(self.config.abort_path).touch()
        checkpoint = Checkpoint.load(self.config.checkpoint_path)
        checkpoint.clean_shutdown_offset = -1
        checkpoint.flush()


def make_message(n: int) -> Message:
    return Message(
        topic=TOPIC,
        body=f"transfer {n} \x00\xff".encode(),
        queue_id=QUEUE,
        properties={
            prop.UNIQ_KEY: f"01ABCDEF{n:026X}",
            prop.TAGS: f"tag{n}",
            prop.KEYS: f"tx-{n}",
            "amount": str(100 * n),
        },
        flag=3,
        born_timestamp=1_700_000_000_000 + n,
        born_host="10.9.8.7:0",
    )


def tags(messages: list[StoredMessage]) -> list[str]:
    return [m.properties[prop.TAGS] for m in messages]


def rejection(call) -> RequestError:  # type: ignore[no-untyped-def]
    """The refusal of ``call`` as the server answers it to a client."""
    with pytest.raises(TransactionRefused) as caught:
        call()
    return transaction_refused(caught.value)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


def test_half_message_is_invisible_and_commit_delivers_it_unchanged(data_dir):
    running = Running(data_dir)
    original = make_message(1)
    transaction_id = running.prepare(original)
    assert running.visible() == []

    running.end(original, transaction_id, commit=True)
    [got] = running.visible()
    running.stop()

    assert got.body == original.body
    assert got.queue_id == QUEUE
    assert got.flag == original.flag
    assert got.born_timestamp == original.born_timestamp
    assert got.born_host == original.born_host
    assert got.sys_flag & TRANSACTION_COMMIT_TYPE
    # TRAN_MSG stays so consumers are told it was a TRANSACTION message.
    assert got.properties == {
        **original.properties,
        prop.TRANSACTION_PREPARED: "true",
        prop.PRODUCER_GROUP: TOPIC,
        prop.TRANSACTION_ID: original.properties[prop.UNIQ_KEY],
    }


def test_rollback_never_delivers(data_dir):
    running = Running(data_dir)
    rolled_back, committed = make_message(1), make_message(2)
    first = running.prepare(rolled_back)
    second = running.prepare(committed)
    running.end(rolled_back, first, commit=False)
    running.end(committed, second, commit=True)
    visible = running.visible()
    assert running.transactions.unresolved_count == 0
    running.stop()

    assert tags(visible) == ["tag2"]


def test_ending_twice_the_same_way_commits_once(data_dir):
    running = Running(data_dir)
    message = make_message(1)
    transaction_id = running.prepare(message)
    running.end(message, transaction_id, commit=True)
    running.end(message, transaction_id, commit=True)
    running.end(message, transaction_id, commit=True, from_check=True)
    visible = running.visible()
    running.stop()

    assert tags(visible) == ["tag1"]


def test_a_contradicting_end_is_refused(data_dir):
    running = Running(data_dir)
    committed, rolled_back = make_message(1), make_message(2)
    first = running.prepare(committed)
    second = running.prepare(rolled_back)
    running.end(committed, first, commit=True)
    running.end(rolled_back, second, commit=False)

    late_rollback = rejection(lambda: running.end(committed, first, commit=False))
    late_commit = rejection(lambda: running.end(rolled_back, second, commit=True))
    visible = running.visible()
    running.stop()

    assert late_rollback.code == Code.PRECONDITION_FAILED
    assert "already committed" in late_rollback.message
    assert late_commit.code == Code.PRECONDITION_FAILED
    assert "already rolled back" in late_commit.message
    assert tags(visible) == ["tag1"]


def test_unknown_or_mismatched_transaction_ids_are_refused_and_nothing_changes(data_dir, caplog):
    running = Running(data_dir)
    message = make_message(1)
    transaction_id = running.prepare(message)
    normal = running.store.put_message(make_message(2))
    assert normal.append is not None
    at_normal = f"{normal.append.physical_offsets[0]:016X}{normal.append.sizes[0]:08X}"
    inside_half = f"{int(transaction_id[:16], 16) + 8:016X}{transaction_id[16:]}"
    beyond_log = f"{running.store.commit_log.max_offset:016X}{100:08X}"

    refusals = [
        rejection(lambda: running.end(message, "", commit=True)),
        rejection(lambda: running.end(message, "not-a-transaction", commit=True)),
        rejection(lambda: running.end(message, at_normal, commit=True)),
        rejection(lambda: running.end(message, inside_half, commit=True)),
        rejection(lambda: running.end(message, beyond_log, commit=True)),
        rejection(lambda: running.end(message, transaction_id, commit=True, topic="other")),
        rejection(lambda: running.end(message, transaction_id, commit=True, message_id="01FFFF")),
    ]
    assert [r.code for r in refusals] == [Code.INVALID_TRANSACTION_ID] * len(refusals)
    assert "topic 'payments', not 'other'" in refusals[5].message
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []
    # None of that touched the transaction: it still commits.
    assert running.transactions.unresolved_count == 1
    running.end(message, transaction_id, commit=True)
    visible = running.visible()
    running.stop()

    assert tags(visible) == ["tag2", "tag1"]


def test_an_old_half_message_is_checked_with_its_producer_and_the_answer_resolves_it(data_dir):
    running = Running(data_dir)
    message = make_message(1)
    transaction_id = running.prepare(message)

    running.transactions.check_unresolved()
    [(asked, asked_id)] = running.checks
    assert asked_id == transaction_id
    # The producer sees its message as it sent it, not the half topic's copy.
    assert asked.topic == TOPIC
    assert asked.queue_id == QUEUE
    assert asked.unique_id == message.properties[prop.UNIQ_KEY]
    assert asked.body == message.body
    assert prop.REAL_TOPIC not in asked.properties

    running.end(message, asked_id, commit=True, from_check=True)
    running.transactions.check_unresolved()
    visible = running.visible()
    running.stop()

    assert len(running.checks) == 1, "a resolved transaction is not checked again"
    assert tags(visible) == ["tag1"]


def test_a_young_half_message_is_not_checked(data_dir):
    running = Running(data_dir, timeout_ms=NEVER_MS)
    running.prepare(make_message(1))
    running.transactions.check_unresolved()
    running.stop()

    assert running.checks == []


def test_unanswered_checks_end_in_a_rollback(data_dir):
    running = Running(data_dir, check_max=2)
    message = make_message(1)
    transaction_id = running.prepare(message)
    for _ in range(3):
        running.transactions.check_unresolved()

    assert len(running.checks) == 2
    assert running.transactions.unresolved_count == 0
    late = rejection(lambda: running.end(message, transaction_id, commit=True))
    visible = running.visible()
    running.stop()

    assert late.code == Code.PRECONDITION_FAILED
    assert visible == []


def test_clean_restart_keeps_unresolved_halves_and_check_counts(data_dir):
    running = Running(data_dir, check_max=2)
    committed, open_one = make_message(1), make_message(2)
    first = running.prepare(committed)
    second = running.prepare(open_one)
    running.end(committed, first, commit=True)
    running.transactions.check_unresolved()
    running.stop()

    running = Running(data_dir, check_max=2)
    assert running.transactions.unresolved_count == 1
    running.transactions.check_unresolved()
    # The count went on from before the restart: one more ask, and the next round gives up.
    assert len(running.checks) == 1
    running.stop()

    running = Running(data_dir)
    running.end(committed, first, commit=True)  # again, after restarts: still once
    running.end(open_one, second, commit=True)
    visible = running.visible()
    running.stop()

    assert tags(visible) == ["tag1", "tag2"]


def test_crash_after_ending_before_saving_rebuilds_from_the_op_records(data_dir):
    running = Running(data_dir)
    committed, rolled_back, open_one = make_message(1), make_message(2), make_message(3)
    ids = [running.prepare(m) for m in (committed, rolled_back, open_one)]
    running.transactions.persist()
    saved_before_ends = Path(running.state_path).read_bytes()
    running.end(committed, ids[0], commit=True)
    running.end(rolled_back, ids[1], commit=False)
    running.crash_to(saved_before_ends)

    running = Running(data_dir)
    assert not running.store.clean_start
    assert running.transactions.unresolved_count == 1
    running.end(committed, ids[0], commit=True)
    late_commit = rejection(lambda: running.end(rolled_back, ids[1], commit=True))
    running.end(open_one, ids[2], commit=True)
    visible = running.visible()
    running.stop()

    assert late_commit.code == Code.PRECONDITION_FAILED
    assert tags(visible) == ["tag1", "tag3"]


def test_restart_after_many_transactions_reads_only_what_is_unresolved(data_dir):
    running = Running(data_dir)
    for n in range(20):
        message = make_message(n)
        running.end(message, running.prepare(message), commit=n % 2 == 0)
    open_one = make_message(99)
    open_id = running.prepare(open_one)
    running.stop()

    running = Running(data_dir)
    assert running.transactions.unresolved_count == 1
    running.transactions.check_unresolved()
    [(asked, asked_id)] = running.checks
    assert asked_id == open_id
    assert asked.unique_id == open_one.properties[prop.UNIQ_KEY]
    running.stop()


def test_checks_wait_for_the_transaction_timeout(data_dir):
    timeout_ms = 300
    running = Running(data_dir, timeout_ms=timeout_ms)
    running.prepare(make_message(1))
    deadline = time.monotonic() + 30
    while not running.checks and time.monotonic() < deadline:
        running.transactions.check_unresolved()
        time.sleep(0.02)
    checked_at = int(time.time() * 1000)
    running.stop()

    [(asked, _)] = running.checks
    assert checked_at >= asked.store_timestamp + timeout_ms


def test_a_transaction_ended_behind_an_open_one_stays_ended_after_restart(data_dir):
    running = Running(data_dir)
    open_one, committed = make_message(1), make_message(2)
    open_id = running.prepare(open_one)
    committed_id = running.prepare(committed)
    running.end(committed, committed_id, commit=True)
    assert tags(running.visible()) == ["tag2"]
    running.stop()

    running = Running(data_dir)
    assert running.transactions.unresolved_count == 1
    running.end(committed, committed_id, commit=True)
    running.end(open_one, open_id, commit=False)
    visible = running.visible()
    running.stop()

    assert tags(visible) == ["tag2"]


def test_a_half_message_is_not_checked_within_the_immunity_its_producer_asked_for(data_dir):
    running = Running(data_dir)
    immune = make_message(1)
    immune.properties[prop.CHECK_IMMUNITY_TIME_IN_SECONDS] = "3600"
    running.prepare(immune)
    running.prepare(make_message(2))
    running.transactions.check_unresolved()
    assert [m.properties[prop.TAGS] for m, _ in running.checks] == ["tag2"]
    running.stop()

    # The immunity is the half message's own: a restart keeps it.
    again = Running(data_dir)
    again.transactions.check_unresolved()
    again.stop()
    assert [m.properties[prop.TAGS] for m, _ in again.checks] == ["tag2"]
