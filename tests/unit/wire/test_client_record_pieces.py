"""A batch encoded as pieces is the records the general encoder writes for a client, and valid."""

from __future__ import annotations

from skiff_broker.client.encoded_append import EncodedAppendRequest
from skiff_broker.records.v1 import records_pb2 as rpb
from skiff_broker.wire.properties import encode_properties, id_only_properties
from skiff_broker.wire.record_check import check_run
from skiff_broker.wire.record_codec import (
    client_record_pieces,
    decode_record,
    encode_client_record,
    encode_record_into,
    topic_field,
)

NO_HOST = bytes(8)  # an empty IPv4 host and port, as a client leaves them


def general_encoding(field: bytes, body: bytes, properties: bytes, sys_flag: int = 0) -> bytes:
    """The record as ``encode_record_into`` (the broker's encoder) writes it for a client."""
    blob = bytearray()
    encode_record_into(blob, field, body, properties, 0, 0, sys_flag, BORN, NO_HOST, NO_HOST, 0, 0)
    return bytes(blob)


BORN = 1_700_000_000_123
MESSAGES = [
    (b"x", id_only_properties("ID-1")),
    (bytes(range(256)) * 5, encode_properties({"UNIQ_KEY": "ID-2", "TAGS": "a", "k": "v"})),
    ("tëxt".encode(), id_only_properties("ID-3")),
]


def test_pieces_join_to_the_records_the_general_encoder_writes() -> None:
    field = topic_field("topic-ü")
    pieces: list[bytes] = []
    length = client_record_pieces(pieces, field, MESSAGES, BORN)
    joined = b"".join(pieces)
    assert joined == b"".join(
        general_encoding(field, body, properties) for body, properties in MESSAGES
    )
    assert length == len(joined)
    checked = check_run(joined, 0, len(joined))
    assert checked.problem is None and checked.records == len(MESSAGES)
    first = decode_record(joined)
    assert (first.topic, first.body, first.born_timestamp) == ("topic-ü", b"x", BORN)


def test_pieces_are_appended_after_what_the_list_holds() -> None:
    pieces = [b"head"]
    length = client_record_pieces(pieces, topic_field("t"), MESSAGES[:1], BORN)
    assert pieces[0] == b"head" and len(b"".join(pieces[1:])) == length


def test_encoded_append_request_is_the_protobuf_requests_bytes() -> None:
    field = topic_field("orders")
    pieces: list[bytes] = []
    # Records long enough that the length takes a multi-byte varint.
    length = client_record_pieces(pieces, field, MESSAGES * 100, BORN)
    records = b"".join(pieces)
    request = EncodedAppendRequest("orders", pieces, length)
    assert (
        request.SerializeToString()
        == rpb.AppendRequest(topic="orders", records=records).SerializeToString()
    )
    parsed = rpb.AppendRequest.FromString(request.wire)
    assert (parsed.topic, parsed.records) == ("orders", records)
    assert (request.topic, request.records) == ("orders", records)


def test_an_empty_request_matches_protobufs_too() -> None:
    for topic in ("", "t"):
        request = EncodedAppendRequest(topic, [], 0)
        assert request.wire == rpb.AppendRequest(topic=topic).SerializeToString()
        assert request.records == b""


def test_one_client_record_carries_its_sys_flag_as_the_general_encoder_writes_it() -> None:
    field = topic_field("t")
    compressed = 0x1  # a body flagged compressed
    body, properties = MESSAGES[1]
    assert encode_client_record(field, body, properties, BORN, compressed) == general_encoding(
        field, body, properties, compressed
    )
