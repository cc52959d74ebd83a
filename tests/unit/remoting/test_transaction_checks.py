"""The body of a CHECK_TRANSACTION_STATE: the half message as its producer sent it."""

from __future__ import annotations

from skiff_broker.remoting.transactions import check_body
from skiff_broker.store.message import StoredMessage, decode_record
from skiff_broker.wire.record_layout import TRANSACTION_PREPARED_TYPE


def test_the_check_carries_the_message_with_its_log_positions_in_rocketmqs_encoding() -> None:
    message = StoredMessage(
        topic="orders-tx",
        body=b"tx-2",
        queue_id=1,
        queue_offset=7,
        physical_offset=1758,
        store_size=0,
        properties={"UNIQ_KEY": "AC11", "PGROUP": "payers-tx", "origin": "remoting"},
        flag=0,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        born_host="10.0.0.5:50122",
        store_timestamp=1_700_000_000_123,
        store_host="127.0.0.1:8080",
        reconsume_times=0,
        prepared_transaction_offset=0,
        body_crc=0,
    )
    decoded = decode_record(check_body(message))
    assert (decoded.topic, decoded.body, decoded.queue_id) == ("orders-tx", b"tx-2", 1)
    assert decoded.properties == message.properties
    assert (decoded.queue_offset, decoded.physical_offset) == (7, 1758)
    assert decoded.store_timestamp == message.store_timestamp
    assert (decoded.born_host, decoded.store_host) == ("10.0.0.5:50122", "127.0.0.1:8080")
    assert decoded.sys_flag & TRANSACTION_PREPARED_TYPE
