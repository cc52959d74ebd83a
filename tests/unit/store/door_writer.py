"""A writer process for the door/recovery agreement test: appends through the Append door.

    python tests/unit/store/door_writer.py DATA_DIR < records

Each input line is ``<topic hex> <records hex>``: one Append request. The door
(``prepare_records``) checks it and the store appends it, as the records
service does. For every record stored the writer prints

    ack <physical offset> <size> <stored bytes hex>

with the bytes read back from its commit log; a refused request prints
``refused <reason>``. After the last line it prints ``done`` and waits to be
killed: the test SIGKILLs it, so the next start finds the abort file and scans.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

_BROKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "broker")
if _BROKER not in sys.path:
    sys.path.insert(0, _BROKER)

from skiff_broker.store.commit_log import AppendRejected  # noqa: E402
from skiff_broker.store.config import StoreConfig  # noqa: E402
from skiff_broker.store.message_store import MessageStore  # noqa: E402
from skiff_broker.store.prepared_records import prepare_records  # noqa: E402
from skiff_broker.wire.hosts import encode_host  # noqa: E402

SEGMENT_SIZE = 64 * 1024


def store_config(data_dir: str) -> StoreConfig:
    """The settings the writer runs with; the test opens the store the same way."""
    return StoreConfig(
        data_dir=data_dir,
        commit_log_file_size=SEGMENT_SIZE,
        consume_queue_units_per_file=300,
        max_message_size=16 * 1024,
        max_hash_slot_num=1000,
        max_index_num=4000,
        warm_mapped_files=False,
        disk_max_used_space_ratio=100,
        disk_space_clean_forcibly_ratio=1.0,
        disk_space_warning_level_ratio=1.0,
    )


async def write(store: MessageStore) -> None:
    born_host = encode_host("127.0.0.1:4000")
    for line in sys.stdin:
        topic_hex, records_hex = line.split()
        try:
            batch = prepare_records(
                bytes.fromhex(records_hex),
                bytes.fromhex(topic_hex).decode(),
                0,
                born_host=born_host,
                store_host=store.commit_log.store_host,
                max_message_size=store.config.max_message_size,
                born_default=int(time.time() * 1000),
            )
        except AppendRejected as exc:
            print("refused", exc.reason.replace("\n", " "), flush=True)
            continue
        result = await store.put_records_async(batch)
        assert result.ok and result.append is not None, result.reason
        append = result.append
        for physical, size in zip(append.physical_offsets, append.sizes, strict=True):
            stored = store.commit_log.read(physical, size)
            assert stored is not None
            print("ack", physical, size, stored.hex(), flush=True)


def main() -> None:
    store = MessageStore(store_config(sys.argv[1]))
    store.start()
    asyncio.run(write(store))
    print("done", flush=True)
    while True:  # until SIGKILL: no shutdown, no checkpoint
        time.sleep(60)


if __name__ == "__main__":
    main()
