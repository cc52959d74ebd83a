"""How Skiff's v2 client gives a received body: inflated, or as stored with the reason.

The messages are protos as a broker sends them; no broker is needed to decode them.
"""

from __future__ import annotations

import gzip
import logging
import zlib

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from skiff_broker.client import messaging
from skiff_broker.client.messaging import stored_fields
from skiff_broker.wire.property_names import UNINFLATABLE_BODY


def received(body: bytes, encoding: int, properties: dict[str, str] | None = None) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name="t"),
        body=body,
        user_properties=properties or {},
        system_properties=pb.SystemProperties(
            message_id="ID-1", body_encoding=encoding, queue_id=2, queue_offset=7
        ),
    )


@pytest.mark.parametrize("compress", [zlib.compress, gzip.compress])
def test_a_good_compressed_body_is_inflated(compress, caplog):
    fields = stored_fields(received(compress(b"hello" * 100), pb.Encoding.GZIP))
    assert (fields["body"], fields["body_problem"]) == (b"hello" * 100, "")
    assert not caplog.records


def test_a_gzip_body_that_does_not_inflate_is_given_as_stored_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        fields = stored_fields(received(b"not compressed", pb.Encoding.GZIP))
    assert fields["body"] == b"not compressed"
    assert "not zlib or gzip data" in fields["body_problem"]
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING
    assert "ID-1" in warning.getMessage() and "offset 7" in warning.getMessage()


def test_a_body_past_the_clients_cap_is_given_as_stored(monkeypatch):
    # The real cap is 128 MiB; a smaller one keeps the test's memory small.
    monkeypatch.setattr(messaging, "MAX_INFLATED_BODY", 1024)
    bomb = zlib.compress(bytes(1 << 20))
    fields = stored_fields(received(bomb, pb.Encoding.GZIP))
    assert fields["body"] == bomb
    assert "inflates to more than 1024 bytes" in fields["body_problem"]


def test_the_brokers_reason_is_taken_out_of_the_properties(caplog):
    message = received(b"\x01raw", pb.Encoding.IDENTITY, {UNINFLATABLE_BODY: "why", "u": "1"})
    with caplog.at_level(logging.WARNING):
        fields = stored_fields(message)
    assert (fields["body"], fields["body_problem"]) == (b"\x01raw", "why")
    assert fields["properties"] == {"u": "1"}
    assert "why" in caplog.records[0].getMessage()
