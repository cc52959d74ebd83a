"""The producer's property rules, and the ID rule the Append door checks a run by."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.wire.message_rules import producer_property_problem
from skiff_broker.wire.property_names import UNIQ_KEY, message_id_problem


@given(message_id=st.text(max_size=40) | st.sampled_from(["", " ", "\t\n", "\x1f", "\x00"]))
def test_an_id_only_message_passes_exactly_when_its_id_does(message_id: str) -> None:
    assert producer_property_problem({UNIQ_KEY: message_id}) == message_id_problem(message_id)


def test_a_blank_id_is_refused_with_what_to_do() -> None:
    assert message_id_problem(" \t") == "it needs a UNIQ_KEY property: the message ID"
    assert message_id_problem("0A0000010000A1B2C3D4E5F60000000A") is None
