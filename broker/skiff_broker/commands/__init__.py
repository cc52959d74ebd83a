"""Client commands of ``skiff``: topics, consumer groups, admin look-ups, sending and consuming."""

from __future__ import annotations

import click

from .admin_commands import admin
from .group_commands import group
from .messaging_commands import consume, send
from .topic_commands import topic
from .traces_commands import traces


def register(main: click.Group) -> None:
    for command in (topic, group, admin, send, consume, traces):
        main.add_command(command)
