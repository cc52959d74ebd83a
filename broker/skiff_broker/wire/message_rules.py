"""What a producer's message may carry in its tag, keys, user properties and message group.

The rules and limits are Apache RocketMQ 5.3 proxy's (its send path and ProxyConfig
defaults), checked in the proxy's order so a message both refuse is refused for the
same reason; the wording follows the proxy's, with what to do added:

- no control character (U+0000-U+001F, U+007F-U+009F) in a tag, a key, a user
  property's name or value, or a message group; none of them all white space;
- no ``|`` in a tag; no RocketMQ or Skiff system property name as a user property;
- at most ``MAX_USER_PROPERTIES`` user properties, and their names and values, the
  tag and the keys together at most ``MAX_USER_PROPERTIES_BYTES`` of UTF-8;
- a message group shorter than ``MAX_MESSAGE_GROUP_BYTES`` bytes of UTF-8.

Skiff is stricter where its record format needs it: a key may not be empty or hold
white space (a record keeps its keys joined by spaces), a tag that is set may not be
empty, and a property name may not be empty.

Invariant: a message these rules accept has no record separator (``\\x01``, ``\\x02``)
in its tag, keys or user properties: both are control characters.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..error_text import quoted
from .property_names import KEYS, TAGS, UNIQ_KEY, is_reserved, message_id_problem

MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTIES_BYTES = 16 * 1024
MAX_MESSAGE_GROUP_BYTES = 64
# Properties a producer sets among the broker's own.
_PRODUCER_PROPERTIES = frozenset({TAGS, KEYS, UNIQ_KEY})

# Java's Character.isISOControl: what RocketMQ calls a control character.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# str.isspace()'s white space: what Skiff refuses inside a key.
_WHITE_SPACE = re.compile(r"\s")
_CONTROL_NAMED = "control characters (U+0000-U+001F, U+007F-U+009F)"
# Java's Character.isWhitespace outside the Unicode separators: what StringUtils.isBlank sees.
_JAVA_SPACE_CONTROLS = frozenset("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f")
_NO_BREAK_SPACES = frozenset("\u00a0\u2007\u202f")
_SEPARATOR_CATEGORIES = frozenset({"Zs", "Zl", "Zp"})


class Refusal(enum.Enum):
    """Which part of a message a problem is in (the v2 status code the send door answers)."""

    KEY = "ILLEGAL_MESSAGE_KEY"
    TAG = "ILLEGAL_MESSAGE_TAG"
    PROPERTY = "ILLEGAL_MESSAGE_PROPERTY_KEY"
    TOO_LARGE = "MESSAGE_PROPERTIES_TOO_LARGE"
    GROUP = "ILLEGAL_MESSAGE_GROUP"


@dataclass(frozen=True, slots=True)
class Problem:
    refusal: Refusal
    text: str


def _java_space(char: str) -> bool:
    if char in _JAVA_SPACE_CONTROLS:
        return True
    return char not in _NO_BREAK_SPACES and unicodedata.category(char) in _SEPARATOR_CATEGORIES


def is_blank(text: str) -> bool:
    """True if ``text`` is non-empty and all white space, as Java's StringUtils.isBlank."""
    # The first character settles it for almost every text, cheaply.
    return bool(text) and _java_space(text[0]) and all(_java_space(char) for char in text)


def has_control(text: str) -> bool:
    return _CONTROL.search(text) is not None


def utf8_size(text: str) -> int:
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def tag_problem(tag: str) -> Problem | None:
    if not tag:
        return Problem(Refusal.TAG, "tag cannot be empty; leave the tag unset instead")
    if is_blank(tag):
        return Problem(
            Refusal.TAG, "tag cannot be the char sequence of whitespace; choose a visible tag"
        )
    if "|" in tag:
        return Problem(Refusal.TAG, "tag cannot contain '|' (it separates tags in a subscription)")
    if has_control(tag):
        return Problem(
            Refusal.TAG, f"tag cannot contain control character; remove {_CONTROL_NAMED}"
        )
    return None


def key_problem(key: str) -> Problem | None:
    if not key:
        return Problem(Refusal.KEY, "key cannot be empty; leave the empty key out")
    if is_blank(key):
        return Problem(Refusal.KEY, "key cannot be the char sequence of whitespace")
    if has_control(key):
        return Problem(
            Refusal.KEY, f"key cannot contain control character; remove {_CONTROL_NAMED}"
        )
    if _WHITE_SPACE.search(key) is not None:
        # Stricter than RocketMQ: a record keeps its keys joined by spaces.
        return Problem(
            Refusal.KEY,
            f"key {quoted(key)} cannot contain whitespace (it separates keys); "
            "send it as separate keys",
        )
    return None


def user_property_problem(name: str, value: str) -> Problem | None:
    if is_reserved(name):
        return Problem(
            Refusal.PROPERTY,
            f"property is used by system: {quoted(name)} (reserved for the broker); "
            "choose another name",
        )
    if not name:
        return Problem(Refusal.PROPERTY, "the key of property cannot be empty")
    if has_control(name):
        return Problem(
            Refusal.PROPERTY,
            f"the key of property cannot contain control character; remove {_CONTROL_NAMED} "
            f"from {quoted(name)}",
        )
    if has_control(value):
        return Problem(
            Refusal.PROPERTY,
            f"the value of property cannot contain control character; remove {_CONTROL_NAMED} "
            f"from the value of {quoted(name)}",
        )
    return None


def message_group_problem(group: str) -> Problem | None:
    """Why a message may not have this (non-empty) message group; None if it may."""
    if is_blank(group):
        return Problem(Refusal.GROUP, "message group cannot be the char sequence of whitespace")
    # RocketMQ refuses a group of exactly the maximum too.
    if utf8_size(group) >= MAX_MESSAGE_GROUP_BYTES:
        return Problem(
            Refusal.GROUP,
            f"message group exceed the max size {MAX_MESSAGE_GROUP_BYTES}; use a group "
            f"shorter than {MAX_MESSAGE_GROUP_BYTES} bytes of UTF-8",
        )
    if has_control(group):
        return Problem(
            Refusal.GROUP,
            f"message group cannot contain control character; remove {_CONTROL_NAMED}",
        )
    return None


def too_many_properties(count: int) -> Problem | None:
    if count > MAX_USER_PROPERTIES:
        return Problem(
            Refusal.TOO_LARGE,
            f"too many user properties, max is {MAX_USER_PROPERTIES} (this message has "
            f"{count}); move some into the body",
        )
    return None


def too_large(size: int) -> Problem | None:
    if size > MAX_USER_PROPERTIES_BYTES:
        return Problem(
            Refusal.TOO_LARGE,
            f"the total size of user property is too large, max is {MAX_USER_PROPERTIES_BYTES} "
            f"(user properties, tag and keys take {size} bytes); move data into the body",
        )
    return None


def message_problem(
    user_properties: Mapping[str, str], tag: str | None, keys: Iterable[str]
) -> Problem | None:
    """Why a message may not carry these user properties, tag (None: unset) and keys."""
    problem = too_many_properties(len(user_properties))
    if problem is not None:
        return problem
    pairs = list(user_properties.items())
    keys = list(keys)
    texts = [text for pair in pairs for text in pair]
    if tag is not None:
        texts.append(tag)
    texts += keys
    joined = "".join(texts)
    # The usual message has no control character anywhere: one search instead of one a text.
    clean = _CONTROL.search(joined) is None
    for name, value in pairs:
        if clean and name and not is_reserved(name):
            continue
        problem = user_property_problem(name, value)
        if problem is not None:
            return problem
    if tag is not None:
        problem = tag_problem(tag)
        if problem is not None:
            return problem
    for key in keys:
        problem = key_problem(key)
        if problem is not None:
            return problem
    return too_large(utf8_size(joined))


def producer_property_problem(properties: Mapping[str, str]) -> str | None:
    """Why a producer's stored record may not carry these properties; None if it may.

    ``properties`` are a record's: the user's plus TAGS, KEYS (space-joined) and UNIQ_KEY;
    the rules are ``message_problem``'s.
    """
    problem_text = message_id_problem(properties.get(UNIQ_KEY, ""))
    if problem_text is not None:
        return problem_text
    user = {name: value for name, value in properties.items() if name not in _PRODUCER_PROPERTIES}
    joined_keys = properties.get(KEYS)
    keys = [key for key in joined_keys.split(" ") if key] if joined_keys is not None else []
    problem = message_problem(user, properties.get(TAGS), keys)
    return None if problem is None else problem.text
