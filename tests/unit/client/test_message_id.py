import os
import time
import uuid

from skiff_broker.client.message_id import MessageIdGenerator

EPOCH_2021_S = 1_609_459_200


def test_ids_follow_the_official_clients_v1_layout():
    generator = MessageIdGenerator()
    first, second = generator.next(), generator.next()

    for message_id in (first, second):
        assert len(message_id) == 34
        assert message_id == message_id.upper()
        int(message_id, 16)  # all hex
        assert message_id[:2] == "01"
        assert message_id[2:14] == f"{uuid.getnode() & 0xFFFFFFFFFFFF:012X}"
        assert message_id[14:18] == f"{os.getpid() & 0xFFFF:04X}"
        seconds = int(message_id[18:26], 16)
        assert abs(seconds - (time.time() - EPOCH_2021_S)) < 3600
    assert int(second[26:], 16) == int(first[26:], 16) + 1


def test_ids_taken_at_once_continue_the_sequence_of_next():
    generator = MessageIdGenerator()
    first = generator.next()
    taken = generator.take(3)
    after = generator.next()

    ids = [first, *taken, after]
    assert len(set(ids)) == 5
    assert all(len(i) == 34 and i[:18] == first[:18] for i in ids)
    sequences = [int(i[26:], 16) for i in ids]
    assert sequences == list(range(sequences[0], sequences[0] + 5))
    assert generator.take(0) == []


def test_a_long_take_makes_what_next_would_across_the_sequence_wrap():
    # Long takes are made as arrays; they must be the IDs next() would give, including
    # where the 4-byte sequence number wraps to 0.
    for first in (0, 7, 2**32 - 100, 2**32 + 5):
        arrays, one_by_one = MessageIdGenerator(), MessageIdGenerator()
        arrays._sequence = one_by_one._sequence = first
        taken = arrays.take(300)
        assert taken == [one_by_one.next() for _ in range(300)]
        assert arrays.next() == one_by_one.next()
    assert {len(i) for i in taken} == {34}
