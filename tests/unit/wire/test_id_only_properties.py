"""The properties of records that carry nothing but their message ID, one by one and a run."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from skiff_broker.wire.properties import (
    Property,
    encode_properties,
    id_only_properties,
    id_only_properties_each,
)


def test_an_id_only_record_has_the_properties_the_general_encoder_writes() -> None:
    message_id = "01AABBCCDDEEFF12340ABCDEF100000001"
    assert id_only_properties(message_id) == encode_properties({Property.UNIQ_KEY: message_id})


# Newlines included: the run's encoding splits on them, so an ID holding one must not
# change what each record gets.
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",))), max_size=40))
def test_a_run_of_ids_gets_what_each_id_would(message_ids: list[str]) -> None:
    assert id_only_properties_each(message_ids) == [id_only_properties(m) for m in message_ids]
