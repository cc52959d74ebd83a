"""A running broker: the store, topic and offset metadata, and delivery services.

Start order: take the data directory's lock, read every state file (so a
damaged one fails the start before the store is touched), then recover the
store, then start delivery. A start that fails leaves the directory as it found
it: the lock is released, and the store's ``abort`` marker exists afterwards
only if it existed before (a store that had recovered is stopped cleanly).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from .auth.model import User, parse_user_spec
from .auth.user_store import UserStore
from .config import BrokerConfig
from .delivery.backlog import GroupBacklog, group_backlogs
from .delivery.delay import DelayService
from .delivery.pop import PopService
from .delivery.transactions import TransactionService
from .metadata.consumer_offsets import ConsumerOffsetTable
from .metadata.group_settings import GroupSettingsTable
from .metadata.request_modes import RequestModeTable
from .metadata.topic_table import MessageType, Permission, TopicConfig, TopicTable
from .store.file_sizes import adopt_sizes_on_disk
from .store.message_store import MessageStore
from .store.observer import StoreObserver
from .store.private_files import directory_mode, tighten
from .store.service_thread import ServiceThread
from .wire import property_names as prop

log = logging.getLogger(__name__)

REPLICA_REFUSAL = (
    "broker {name} is a replica and takes no writes; send to its master "
    "(routes list only the master's queues as writable)"
)

UNVETTED_USERS = (
    "authentication is on, but %d user(s) of this data directory were made while it was "
    "off or by an older Skiff that did not record how (%s): anyone could have planted "
    "them, so they are refused. Apply each again as a super user (skiff admin user apply, "
    "signed), or stop the broker and use `skiff store user apply` (or `delete`) on its "
    "data directory"
)
# How many access keys a log line names before it only counts the rest.
_NAMED_AT_MOST = 20


def _named(keys: list[str]) -> str:
    shown = ", ".join(keys[:_NAMED_AT_MOST])
    rest = len(keys) - _NAMED_AT_MOST
    return f"{shown} and {rest} more" if rest > 0 else shown


# Topics only the broker reads and writes: scheduled and half messages live there
# until they are due or committed, so no client may send to or read from them.


class StatePersister(ServiceThread):
    """Writes the consumer and delivery state every interval, so a crash loses little of it."""

    name = "persister"

    def __init__(self, persist: Callable[[], None], interval: float) -> None:
        super().__init__(interval)
        self._persist = persist

    def step(self) -> None:
        self._persist()


class Broker:
    def __init__(self, config: BrokerConfig, observer: StoreObserver | None = None) -> None:
        self.config = config
        store_config = config.store
        # An existing store keeps the file sizes it was made with, whatever is configured.
        for kept in adopt_sizes_on_disk(store_config):
            log.info("%s", kept)
        # ``observer`` sees the store's appends and flushes (telemetry).
        self.store = MessageStore(store_config, observer=observer)
        self.topics = TopicTable(os.path.join(store_config.config_dir, "topics.json"))
        # Users and ACLs: kept whether or not authentication is on, so it can be turned on.
        self.users = UserStore(os.path.join(store_config.config_dir, "auth.json"))
        self.offsets = ConsumerOffsetTable(
            os.path.join(store_config.config_dir, "consumerOffset.json")
        )
        self.group_settings = GroupSettingsTable(
            os.path.join(store_config.config_dir, "subscriptionGroup.json")
        )
        self.request_modes = RequestModeTable(
            os.path.join(store_config.config_dir, "messageRequestMode.json")
        )
        # Retention names the groups that had not read what it must delete.
        self.store.consumer_progress = lambda topic, queue_id: {
            group: self.offsets.query(group, topic, queue_id)
            for group in self.offsets.groups_of(topic)
        }
        self.pop = PopService(
            self.store,
            self.offsets,
            os.path.join(store_config.config_dir, "popState.json"),
            max_attempts=config.max_delivery_attempts,
            ensure_dlq_topic=self.ensure_system_topic,
            attempts_of=lambda group: self.retry_max_times(group) + 1,
        )
        self.delays = DelayService(
            self.store, os.path.join(store_config.config_dir, "delayState.json")
        )
        self.transactions = TransactionService(
            self.store,
            os.path.join(store_config.config_dir, "transactionState.json"),
            timeout_ms=int(config.transaction_timeout_s * 1000),
            check_interval_ms=int(config.transaction_check_interval_s * 1000),
            check_max=config.transaction_check_max,
        )
        self._persister = StatePersister(self.persist, config.persist_interval_s)

    def start(self, *, replica: bool = False) -> None:
        """Recover and start serving; a ``replica`` takes no writes until promoted."""
        if replica:
            self.store.read_only_reason = REPLICA_REFUSAL.format(name=self.config.broker_name)
        self.store.lock_data_dir()
        try:
            self._make_private()
            self._load_state()
            self.store.start()
        except BaseException:
            self.store.unlock_data_dir()
            raise
        try:
            if not replica:
                self.start_writers()
        except BaseException:
            # The store recovered: a clean stop leaves it as a finished run would.
            try:
                self.delays.stop()
                self.transactions.stop()
            finally:
                self.store.shutdown()
            raise
        self._persister.start()

    def _make_private(self) -> None:
        """Tighten what others may read or list in the data directory; one line each way."""
        store_config = self.config.store
        gid = store_config.data_dir_gid
        done = tighten(store_config.data_dir, gid)
        if done.changed:
            log.warning(
                "tightened %d file(s) and %d directory(ies) under %s that other users could "
                "read or list: files are now 0600, directories %s",
                done.files,
                done.directories,
                store_config.data_dir,
                f"{directory_mode(gid):o}" + (f" of group {gid}" if gid is not None else ""),
            )
        if done.left:
            log.warning(
                "%d path(s) under %s are not this user's (uid %d), so their modes stay as they "
                "are: %s; chown them to uid %d (what the broker writes inside them is 0600)",
                done.left,
                store_config.data_dir,
                os.geteuid(),
                done.left_text(),
                os.geteuid(),
            )

    def _load_state(self) -> None:
        discard = self.config.discard_damaged_state
        self.topics.load(discard_damaged=discard)
        # Changes a crash left only in the journal go into topics.json now.
        self.topics.compact()
        self.offsets.load(discard_damaged=discard)
        self.group_settings.load(discard_damaged=discard)
        self.request_modes.load(discard_damaged=discard)
        self.pop.load(discard_damaged=discard)
        self.delays.load(discard_damaged=discard)
        self.transactions.load(discard_damaged=discard)
        self.users.load(discard_damaged=discard)
        bootstrap = self.bootstrap_user
        if bootstrap is not None and self.users.apply_user(bootstrap):
            log.info("applied the bootstrap super user from --auth-init-user")
        unvetted = self.users.unvetted()
        if unvetted and self.config.auth.enabled:
            log.warning(UNVETTED_USERS, len(unvetted), _named(unvetted))

    @property
    def bootstrap_user(self) -> User | None:
        """The super user of --auth-init-user, which this broker always has."""
        init_user = self.config.auth.init_user
        return parse_user_spec(init_user) if init_user else None

    def retry_max_times(self, group: str) -> int:
        """How many times ``group`` may consume a message again before it is a dead
        letter: its ``retryMaxTimes`` if set (``updateSubGroup``), else the broker's."""
        retries = self.group_settings.setting(group, "retryMaxTimes")
        return self.config.max_delivery_attempts - 1 if retries is None else int(retries)

    @property
    def is_replica(self) -> bool:
        return bool(self.store.read_only_reason)

    def start_writers(self) -> None:
        """Take writes: delayed and transaction messages are delivered from here on."""
        self.store.read_only_reason = ""
        # Both rebuild what is pending from their system topics, so after the store.
        self.delays.start()
        self.transactions.start()

    def stop_writers(self, reason: str) -> None:
        """Take no more writes (a master stepping down); ``reason`` answers each refused one."""
        self.store.read_only_reason = reason
        self.delays.stop()
        self.transactions.stop()

    def consumer_backlog(self) -> list[GroupBacklog]:
        """Every consumer group's lag, in-flight and ready messages per topic."""
        return group_backlogs(
            self.offsets.positions(),
            self.pop.progress(),
            self.store.min_offset,
            self.store.max_offset,
        )

    def ensure_system_topic(self, name: str, queues: int = 1) -> TopicConfig:
        """A broker-owned topic (dead letters, schedules), created on first use."""
        topic = self.topics.get(name)
        if topic is None:
            topic = TopicConfig(name, queues, queues, Permission.READ_WRITE, MessageType.NORMAL)
            self.topics.put(topic)
            log.info("created topic %s", name)
        return topic

    def topic_for_use(self, name: str) -> TopicConfig | None:
        """The topic's config; created with defaults when auto-creation is on."""
        if name in prop.INTERNAL_TOPICS:
            return None
        topic = self.topics.get(name)
        # A replica's topics are its master's.
        if topic is None and self.config.auto_create_topics and not self.is_replica:
            topic = TopicConfig(
                name, self.config.default_read_queues, self.config.default_write_queues
            )
            self.topics.put(topic)
            log.info("auto-created topic %s", name)
        return topic

    def persist(self) -> None:
        self.pop.persist()
        self.offsets.persist()
        self.delays.persist()
        self.transactions.persist()

    def stop(self) -> None:
        self._persister.stop()
        # Their workers finish what they are writing first, so the saved state matches the log.
        self.delays.stop()
        self.transactions.stop()
        self.persist()
        self.topics.close()
        self.store.shutdown()
