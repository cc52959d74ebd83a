"""``skiff topic create|update|delete|list|get``."""

from __future__ import annotations

from typing import Any

import click

from ..client.admin import AdminClient, MessageType, Permission, Topic
from ..client.credentials import Credentials
from .options import client_command
from .output import echo_json, table

_PERMS = click.Choice([p.value for p in Permission])
_TYPES = click.Choice([t.value for t in MessageType], case_sensitive=False)
_QUEUES = click.IntRange(1, 1024)


def topic_json(topic: Topic) -> dict[str, Any]:
    return {
        "name": topic.name,
        "read_queues": topic.read_queues,
        "write_queues": topic.write_queues,
        "perm": topic.perm.value if topic.perm else None,
        "type": topic.message_type.value,
    }


def _topics_table(topics: list[Topic]) -> str:
    return table(
        ["NAME", "READ", "WRITE", "PERM", "TYPE"],
        [
            [t.name, t.read_queues, t.write_queues, t.perm.value if t.perm else "-", t.message_type]
            for t in topics
        ],
    )


def _summary(topic: Topic) -> str:
    perm = topic.perm.value if topic.perm else "none"
    return (
        f"{topic.read_queues} read / {topic.write_queues} write queues, "
        f"perm {perm}, type {topic.message_type}"
    )


@click.group()
def topic() -> None:
    """Create, change, delete and show topics."""


@topic.command()
@click.argument("name")
@click.option("--read-queues", type=_QUEUES, help="Queues consumers read (default 8).")
@click.option("--write-queues", type=_QUEUES, help="Queues producers write (default: read queues).")
@click.option("--perm", type=_PERMS, default="rw", show_default=True, help="r, w or rw.")
@click.option("--type", "message_type", type=_TYPES, default="NORMAL", show_default=True)
@client_command
def create(
    name: str,
    read_queues: int | None,
    write_queues: int | None,
    perm: str,
    message_type: str,
    endpoint: str,
    credentials: Credentials | None,
    as_json: bool,
) -> None:
    """Create topic NAME."""
    read = read_queues or write_queues or 8
    with AdminClient(endpoint, credentials=credentials) as admin:
        created = admin.create_topic(
            name,
            read_queues=read,
            write_queues=write_queues or read,
            perm=Permission(perm),
            message_type=MessageType(message_type.upper()),
        )
    if as_json:
        echo_json(topic_json(created))
    else:
        click.echo(f"created topic {created.name}: {_summary(created)}")


@topic.command()
@click.argument("name")
@click.option("--read-queues", type=_QUEUES)
@click.option("--write-queues", type=_QUEUES)
@click.option("--perm", type=_PERMS, help="r, w or rw.")
@click.option("--type", "message_type", type=_TYPES)
@client_command
def update(
    name: str,
    read_queues: int | None,
    write_queues: int | None,
    perm: str | None,
    message_type: str | None,
    endpoint: str,
    credentials: Credentials | None,
    as_json: bool,
) -> None:
    """Change topic NAME; options not given keep their value.

    To shrink a topic, lower --write-queues first, let consumers drain the
    queues no longer written, then lower --read-queues. The broker refuses a
    change that would leave messages nobody reads, and says why.
    """
    if read_queues is None and write_queues is None and perm is None and message_type is None:
        raise click.UsageError(
            "nothing to change: give --read-queues, --write-queues, --perm or --type"
        )
    with AdminClient(endpoint, credentials=credentials) as admin:
        updated = admin.update_topic(
            name,
            read_queues=read_queues,
            write_queues=write_queues,
            perm=Permission(perm) if perm else None,
            message_type=MessageType(message_type.upper()) if message_type else None,
        )
    if as_json:
        echo_json(topic_json(updated))
    else:
        click.echo(f"updated topic {updated.name}: {_summary(updated)}")


@topic.command()
@click.argument("name")
@client_command
def delete(name: str, endpoint: str, credentials: Credentials | None, as_json: bool) -> None:
    """Delete topic NAME with its queues and consumer offsets."""
    with AdminClient(endpoint, credentials=credentials) as admin:
        admin.delete_topic(name)
    if as_json:
        echo_json({"name": name, "deleted": True})
    else:
        click.echo(f"deleted topic {name}")


@topic.command("list")
@client_command
def list_topics(endpoint: str, credentials: Credentials | None, as_json: bool) -> None:
    """List every topic."""
    with AdminClient(endpoint, credentials=credentials) as admin:
        topics = admin.list_topics()
    if as_json:
        echo_json([topic_json(t) for t in topics])
    elif topics:
        click.echo(_topics_table(topics))
    else:
        click.echo("no topics; create one with 'skiff topic create NAME'")


@topic.command()
@click.argument("name")
@client_command
def get(name: str, endpoint: str, credentials: Credentials | None, as_json: bool) -> None:
    """Show topic NAME."""
    with AdminClient(endpoint, credentials=credentials) as admin:
        found = admin.get_topic(name)
    if as_json:
        echo_json(topic_json(found))
    else:
        click.echo(_topics_table([found]))
