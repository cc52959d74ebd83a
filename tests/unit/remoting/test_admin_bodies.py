"""Admin bodies as RocketMQ's fastjson reads them, and the attributes updateTopic sends."""

from __future__ import annotations

import pytest

from skiff_broker.metadata.topic_table import MessageType
from skiff_broker.remoting.admin_requests import _message_type, queue_key, queue_map
from skiff_broker.remoting.service import HeaderError


def test_a_queue_keyed_map_writes_each_queue_object_as_its_key() -> None:
    body = queue_map([(queue_key("t", "b", 0), 5), (queue_key("t", "b", 1), {"maxOffset": 2})])
    assert body == (
        '{{"brokerName":"b","queueId":0,"topic":"t"}:5,'
        '{"brokerName":"b","queueId":1,"topic":"t"}:{"maxOffset": 2}}'
    )
    assert queue_map([]) == "{}"


def test_update_topic_attributes_name_the_message_type_or_are_refused() -> None:
    assert _message_type("+message.type=FIFO") is MessageType.FIFO
    assert _message_type("+other=1,+message.type=delay") is MessageType.DELAY
    assert _message_type("") is None
    with pytest.raises(HeaderError, match="use NORMAL, FIFO, DELAY or TRANSACTION"):
        _message_type("+message.type=LOUD")
