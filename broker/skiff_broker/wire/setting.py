"""A config field's command-line face: option name, ``SKIFF_*`` variable, help, accepted values.

A field declared with :func:`option` is a setting a user can give; its default is the
field's default and nothing else's. ``skiff broker`` makes its options from these
declarations (``skiff_broker.broker_options``), so each setting's name, variable, help and
default are written once, beside the field that holds it. The declarations are plain data:
this module sits in wire/, the bottom layer, because the store's config may import nothing
above it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

# The key of a declared field's metadata.
OPTION = "skiff.option"


@dataclasses.dataclass(frozen=True, slots=True)
class Option:
    # The long option, e.g. "--listen"; a bool without words also gets "--no-..." .
    name: str
    # The environment variable read when the option is not given, e.g. "SKIFF_LISTEN".
    env: str
    help: str = ""
    # "size": bytes, also written 64m or 1g; "directory" or "file": a path, made absolute.
    kind: Literal["", "size", "directory", "file"] = ""
    # Bounds of a number (both included unless min_open).
    minimum: float | None = None
    maximum: float | None = None
    min_open: bool = False
    # A bool given as one of two words (true's first), e.g. ("enabled", "disabled").
    words: tuple[str, str] | None = None
    # A choice (an enum's values) matched as written, not in any case.
    exact_case: bool = False
    # A bool turned on by the option alone, with no "--no-..." form.
    flag_only: bool = False
    # The default as --help says it, where the value itself would not tell a user.
    shown_default: str = ""


def option(default: Any, name: str, env: str, help: str = "", **details: Any) -> Any:
    """A dataclass field holding ``default`` that users set with ``name`` or ``env``."""
    return declared_field(default, Option(name, env, help, **details))


def declared_field(default: Any, declaration: Option) -> Any:
    """A dataclass field holding ``default``, set as ``declaration`` says.

    For a declaration that code outside the config names too (an error hint in a client).
    """
    metadata = {OPTION: declaration}
    if isinstance(default, list):
        # A list default is copied for each instance, as a dataclass needs.
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def declared_option(field: dataclasses.Field) -> Option | None:
    """The option a field was declared with, or None for a field users do not set."""
    return field.metadata.get(OPTION)


def field_default(field: dataclasses.Field) -> Any:
    """What a dataclass field holds when not given."""
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default
