"""A record's PROPERTIES: ``name\\x01value\\x02`` pairs, UTF-8.

Invariant: ``encode_properties`` produces only what ``properties_problem`` and the
record validator accept: every pair has a non-empty name, exactly one ``\\x01``
and ends in ``\\x02``; no name or value holds a separator.
"""

from __future__ import annotations

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class Property:
    """Property names the store itself reads (RocketMQ's MessageConst)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    UNIQ_KEY = "UNIQ_KEY"
    KEY_SEPARATOR = " "


def properties_problem(properties: dict[str, str]) -> str | None:
    """Why these properties cannot be written to a record; None if they can."""
    for name, value in properties.items():
        if not name:
            return "a property name must not be empty"
        if (
            NAME_VALUE_SEPARATOR in name
            or PROPERTY_SEPARATOR in name
            or NAME_VALUE_SEPARATOR in value
            or PROPERTY_SEPARATOR in value
        ):
            return (
                f"property {name!r} holds a reserved separator character (\\x01 or \\x02); "
                "remove it from the name and value"
            )
    return None


def encode_properties(properties: dict[str, str]) -> bytes:
    """The PROPERTIES field; ValueError (with what to do) if a name or value cannot be stored."""
    text = "".join([f"{name}\x01{value}\x02" for name, value in properties.items()])
    # Exactly one of each separator per property and no empty name, or check each.
    if (
        text.count(NAME_VALUE_SEPARATOR) != len(properties)
        or text.count(PROPERTY_SEPARATOR) != len(properties)
        or "" in properties
    ):
        problem = properties_problem(properties)
        if problem is not None:
            raise ValueError(problem)
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise ValueError(
            "a property name or value is not valid Unicode text (a lone surrogate)"
        ) from None


# The properties of a record that carries nothing but its message ID.
_ID_ONLY_PREFIX_TEXT = f"{Property.UNIQ_KEY}{NAME_VALUE_SEPARATOR}"
ID_ONLY_PREFIX = _ID_ONLY_PREFIX_TEXT.encode()


_ID_ONLY_SUFFIX = PROPERTY_SEPARATOR.encode()


def id_only_properties(message_id: str) -> bytes:
    """``encode_properties({UNIQ_KEY: message_id})``, for the most common record, cheaply."""
    return ID_ONLY_PREFIX + message_id.encode() + _ID_ONLY_SUFFIX


def id_only_properties_each(message_ids: list[str]) -> list[bytes]:
    """``id_only_properties`` of each of ``message_ids``, for a run: one join, one encode and
    one split in C instead of three steps an ID in Python."""
    if not message_ids:
        return []
    prefix = _ID_ONLY_PREFIX_TEXT
    text = prefix + f"{PROPERTY_SEPARATOR}\n{prefix}".join(message_ids) + PROPERTY_SEPARATOR
    each = text.encode().split(b"\n")
    if len(each) != len(message_ids):  # an ID with a newline in it: one at a time
        return [id_only_properties(message_id) for message_id in message_ids]
    return each


def decode_properties(raw: bytes | bytearray | memoryview | str) -> dict[str, str]:
    """The pairs of a PROPERTIES field the validator accepted (lenient with anything else)."""
    # A reader never fails on text: what the validator refused shows replacement marks.
    text = raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "replace")
    result: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        if pair:
            name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
            result[name] = value
    return result
