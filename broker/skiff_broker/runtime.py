"""A running broker process: the store and the metadata beside it."""

from __future__ import annotations

import logging
import os
import threading

from .metadata.consumer_offsets import ConsumerOffsetTable
from .metadata.topic_table import TopicTable
from .store.config import StoreConfig
from .store.message_store import MessageStore

log = logging.getLogger(__name__)

# RocketMQ persists consumer offsets every five seconds.
OFFSET_PERSIST_INTERVAL = 5.0


class Broker:
    def __init__(self, store_config: StoreConfig) -> None:
        self.store = MessageStore(store_config)
        self.topics = TopicTable(os.path.join(store_config.config_dir, "topics.json"))
        self.offsets = ConsumerOffsetTable(
            os.path.join(store_config.config_dir, "consumerOffset.json")
        )
        self._stop = threading.Event()
        self._persister: threading.Thread | None = None

    def start(self) -> None:
        self.store.start()
        self.topics.load()
        self.offsets.load()
        self._persister = threading.Thread(
            target=self._persist_offsets, name="offset-persister", daemon=True
        )
        self._persister.start()

    def _persist_offsets(self) -> None:
        while not self._stop.wait(OFFSET_PERSIST_INTERVAL):
            try:
                self.offsets.persist()
            except OSError:
                log.exception("could not persist consumer offsets; will retry")

    def stop(self) -> None:
        self._stop.set()
        if self._persister is not None:
            self._persister.join()
        self.offsets.persist()
        self.store.shutdown()
