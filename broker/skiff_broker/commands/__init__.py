"""Client commands of ``skiff``: topics, admin look-ups, sending and consuming."""

from __future__ import annotations

import click

from .admin_commands import admin
from .messaging_commands import consume, send
from .topic_commands import topic
from .traces_commands import traces


def register(main: click.Group) -> None:
    for command in (topic, admin, send, consume, traces):
        main.add_command(command)
