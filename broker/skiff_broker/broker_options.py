"""`skiff broker`'s options, made from the settings declared on the config objects.

Every field declared with ``wire.setting.option`` on BrokerConfig or a config nested in it
becomes one click option with the field's default, variable and help; :func:`broker_config`
turns the parsed values back into the config objects. So a setting is written once, on
its field, and an option's default is always its field's default.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import typing
from collections.abc import Callable, Iterator
from typing import Any

import click

from .config import BrokerConfig
from .wire.setting import Option, declared_option, field_default

_SIZE_SUFFIXES = {"k": 1024, "m": 1024**2, "g": 1024**3}


class ByteSize(click.ParamType):
    """``1073741824``, ``1g``, ``256m`` or ``64k``."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().removesuffix("ib").removesuffix("b")
        factor = _SIZE_SUFFIXES.get(text[-1:], 1)
        number = text[:-1] if text[-1:] in _SIZE_SUFFIXES else text
        try:
            return int(float(number) * factor)
        except ValueError:
            self.fail(f"{value!r} is not a size like 1g, 256m or 65536", param, ctx)


def _whole(bound: float | None) -> int | None:
    """An int setting's bound: declared as a number, whole for an int setting."""
    return None if bound is None else int(bound)


def written_size(size: int) -> str:
    """A byte count as a user would type it: 64m rather than 67108864."""
    for suffix, factor in sorted(_SIZE_SUFFIXES.items(), key=lambda item: -item[1]):
        if size and size % factor == 0:
            return f"{size // factor}{suffix}"
    return str(size)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One declared field and how users give it."""

    field: dataclasses.Field
    # The field's type, resolved from its annotation.
    kind: Any
    option: Option

    @property
    def param(self) -> str:
        """The click parameter name (the option's, in snake case)."""
        return self.option.name.removeprefix("--").replace("-", "_")

    @property
    def default(self) -> Any:
        return field_default(self.field)


def _fields(config: type) -> Iterator[tuple[dataclasses.Field, Any, Option | None]]:
    """Each field of ``config`` with its resolved type and its declared option, if any."""
    kinds = typing.get_type_hints(config)
    for field in dataclasses.fields(config):
        yield field, kinds[field.name], declared_option(field)


def settings(config: type = BrokerConfig) -> Iterator[Setting]:
    """Every declared field of ``config`` and of the configs nested in it, in field order."""
    for field, kind, option in _fields(config):
        if option is not None:
            yield Setting(field, kind, option)
        elif isinstance(kind, type) and dataclasses.is_dataclass(kind):
            yield from settings(kind)


def option_arguments(setting: Setting) -> tuple[list[str], dict[str, Any]]:
    """What click.option takes to make the option users give ``setting`` with."""
    option, kind, default = setting.option, setting.kind, setting.default
    declaration = option.name
    details: dict[str, Any] = {}
    if kind is bool and option.words:
        details["type"] = click.Choice(option.words, case_sensitive=False)
        default = option.words[0] if default else option.words[1]
    elif kind is bool:
        if option.flag_only:
            details["is_flag"] = True
        else:
            declaration = f"{option.name}/--no-{option.name.removeprefix('--')}"
    elif isinstance(kind, type) and issubclass(kind, enum.Enum):
        details["type"] = click.Choice(
            [member.value for member in kind], case_sensitive=option.exact_case
        )
        default = default.value
    elif option.kind == "size":
        details["type"] = ByteSize()
        default = written_size(default)
    elif option.kind == "directory":
        details["type"] = click.Path(file_okay=False)
    elif option.kind == "file":
        details["type"] = click.Path(dir_okay=False)
    elif typing.get_origin(kind) is list:
        default = ",".join(default)
    elif kind is int and (option.minimum is not None or option.maximum is not None):
        details["type"] = click.IntRange(_whole(option.minimum), _whole(option.maximum))
    elif kind is float and (option.minimum is not None or option.maximum is not None):
        details["type"] = click.FloatRange(option.minimum, option.maximum, min_open=option.min_open)
    elif kind in (int, float):
        details["type"] = kind
    if option.shown_default:
        show_default: bool | str = option.shown_default
    else:
        show_default = default not in ("", None) and not option.flag_only
    return [declaration, setting.param], {
        "envvar": option.env,
        "default": default,
        "show_default": show_default,
        "help": option.help or None,
        **details,
    }


def field_value(setting: Setting, value: Any) -> Any:
    """The field value of what click parsed for ``setting``."""
    option, kind = setting.option, setting.kind
    if kind is bool and option.words:
        return value.lower() == option.words[0]
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return {member.value.lower(): member for member in kind}[value.lower()]
    if option.kind in ("directory", "file"):
        return os.path.abspath(value) if value else ""
    if typing.get_origin(kind) is list:
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def with_broker_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``command`` an option for every declared setting, in declaration order."""
    # Decorators apply bottom-up: the last applied option is listed first.
    for setting in reversed(list(settings())):
        declarations, details = option_arguments(setting)
        command = click.option(*declarations, **details)(command)
    return command


def broker_config(values: dict[str, Any], config: type = BrokerConfig) -> Any:
    """``config`` (and the configs nested in it) from the options click parsed."""
    given: dict[str, Any] = {}
    for field, kind, option in _fields(config):
        if option is not None:
            setting = Setting(field, kind, option)
            given[field.name] = field_value(setting, values[setting.param])
        elif isinstance(kind, type) and dataclasses.is_dataclass(kind):
            given[field.name] = broker_config(values, kind)
    return config(**given)


def declared(config: type, field_name: str) -> Option:
    """The option declared on ``config``'s field, for commands that reuse its name."""
    (field,) = [f for f in dataclasses.fields(config) if f.name == field_name]
    option = declared_option(field)
    assert option is not None, f"{config.__name__}.{field_name} declares no option"
    return option
