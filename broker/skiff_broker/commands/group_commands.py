"""``skiff group list|describe|reset|delete``: consumer groups and their positions."""

from __future__ import annotations

from typing import Any

import click

from ..client.admin import AdminClient, GroupDescription, QueueReset, ResetTo
from ..client.credentials import Credentials
from .options import Timestamp, client_command
from .output import echo_json, plural, table, time_text


def _offset(value: int) -> int | str:
    return "-" if value < 0 else value


@click.group()
def group() -> None:
    """List, describe, reset and delete consumer groups."""


@group.command("list")
@click.option("--topic", default="", help="Only groups that have this topic.")
@client_command
def list_groups(topic: str, endpoint: str, credentials: Credentials | None, as_json: bool) -> None:
    """List groups with committed offsets or live consumers, with their total lag."""
    with AdminClient(endpoint, credentials=credentials) as admin:
        groups = admin.list_consumer_groups(topic)
    if as_json:
        echo_json(
            [
                {
                    "group": g.group,
                    "topics": list(g.topics),
                    "live_consumers": g.live_consumers,
                    "total_lag": g.total_lag,
                }
                for g in groups
            ]
        )
    elif groups:
        click.echo(
            table(
                ["GROUP", "TOPICS", "LIVE", "LAG"],
                [
                    [g.group, ",".join(g.topics) or "-", g.live_consumers, g.total_lag]
                    for g in groups
                ],
            )
        )
    else:
        where = f" of topic {topic}" if topic else ""
        click.echo(f"no consumer groups{where}; a group appears once it consumes")


def _description_json(described: GroupDescription) -> dict[str, Any]:
    return {
        "group": described.group,
        "topics": [
            {
                "topic": t.topic,
                "total_lag": t.total_lag,
                "queues": [
                    {
                        "queue_id": q.queue_id,
                        "min_offset": q.min_offset,
                        "max_offset": q.max_offset,
                        "consumer_offset": q.consumer_offset,
                        "next_offset": q.next_offset,
                        "lag": q.lag,
                        "in_flight": q.in_flight,
                        "invisible": q.invisible,
                        "last_commit_time": q.last_commit_time,
                    }
                    for q in t.queues
                ],
            }
            for t in described.topics
        ],
        "consumers": [
            {"client_id": c.client_id, "client_type": c.client_type, "topics": list(c.topics)}
            for c in described.consumers
        ],
    }


def _description_text(described: GroupDescription) -> str:
    parts = []
    for t in described.topics:
        parts.append(f"topic {t.topic}: lag {t.total_lag}")
        parts.append(
            table(
                [
                    "QUEUE",
                    "MIN",
                    "MAX",
                    "CONSUMED",
                    "NEXT",
                    "LAG",
                    "IN-FLIGHT",
                    "INVISIBLE",
                    "LAST-COMMIT",
                ],
                [
                    [
                        q.queue_id,
                        q.min_offset,
                        q.max_offset,
                        _offset(q.consumer_offset),
                        _offset(q.next_offset),
                        q.lag,
                        q.in_flight,
                        q.invisible,
                        time_text(q.last_commit_time),
                    ]
                    for q in t.queues
                ],
            )
        )
        parts.append("")
    if described.consumers:
        parts.append(f"{plural(len(described.consumers), 'live consumer')}:")
        parts.append(
            table(
                ["CLIENT", "TYPE", "TOPICS"],
                [
                    [c.client_id, c.client_type, ",".join(c.topics) or "-"]
                    for c in described.consumers
                ],
            )
        )
    else:
        parts.append("no live consumers")
    return "\n".join(parts)


@group.command()
@click.argument("name")
@click.option("--topic", default="", help="Only this topic (default: every topic of the group).")
@client_command
def describe(
    name: str, topic: str, endpoint: str, credentials: Credentials | None, as_json: bool
) -> None:
    """Show group NAME per topic and queue: offsets, lag, deliveries in flight, consumers.

    CONSUMED is the first offset not acknowledged ('-': the group never read the
    queue; it starts at MIN); NEXT the next offset not yet handed out; INVISIBLE
    counts deliveries in flight that are not yet due to be delivered again.
    """
    with AdminClient(endpoint, credentials=credentials) as admin:
        described = admin.describe_consumer_group(name, topic)
    if as_json:
        echo_json(_description_json(described))
    else:
        click.echo(_description_text(described))


def _reset_target(
    to_earliest: bool, to_latest: bool, to_offset: int | None, to_time: int | None
) -> tuple[ResetTo, int, int]:
    chosen = [
        (ResetTo.EARLIEST, 0, 0) if to_earliest else None,
        (ResetTo.LATEST, 0, 0) if to_latest else None,
        (ResetTo.OFFSET, to_offset, 0) if to_offset is not None else None,
        (ResetTo.TIMESTAMP, 0, to_time) if to_time is not None else None,
    ]
    given = [c for c in chosen if c is not None]
    if len(given) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-offset or --to-time"
        )
    return given[0]


def _moves_text(moves: list[QueueReset]) -> str:
    return table(
        ["QUEUE", "FROM", "TO", "MOVE"],
        [
            [
                m.queue_id,
                _offset(m.old_offset),
                m.new_offset,
                "-" if m.old_offset < 0 else f"{m.new_offset - m.old_offset:+d}",
            ]
            for m in moves
        ],
    )


@group.command()
@click.argument("name")
@click.option("--topic", required=True)
@click.option("--to-earliest", is_flag=True, help="Re-read everything still stored.")
@click.option("--to-latest", is_flag=True, help="Skip to the end: only new messages.")
@click.option("--to-offset", type=click.IntRange(0), help="This queue offset (use with --queue).")
@click.option("--to-time", type=Timestamp(), help="The first message stored at or after a time.")
@click.option(
    "--queue", "queues", type=click.IntRange(0), multiple=True, help="Only this queue (repeatable)."
)
@click.option("--dry-run", is_flag=True, help="Show what would move; change nothing.")
@click.option("--force", is_flag=True, help="Reset even while consumers of the group are live.")
@client_command
def reset(
    name: str,
    topic: str,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    to_time: int | None,
    queues: tuple[int, ...],
    dry_run: bool,
    force: bool,
    endpoint: str,
    credentials: Credentials | None,
    as_json: bool,
) -> None:
    """Move group NAME's position in TOPIC; deliveries in flight there are forgotten.

    Refused while the group has live consumers: stop them first, or --force
    (they then go on from the new position). --dry-run shows the moves first.
    """
    to, offset, timestamp = _reset_target(to_earliest, to_latest, to_offset, to_time)
    with AdminClient(endpoint, credentials=credentials) as admin:
        moves = admin.reset_consumer_group(
            name,
            topic,
            to,
            offset=offset,
            timestamp_ms=timestamp,
            queue_ids=queues,
            dry_run=dry_run,
            force=force,
        )
    if as_json:
        echo_json(
            {
                "group": name,
                "topic": topic,
                "applied": not dry_run,
                "queues": [
                    {"queue_id": m.queue_id, "old_offset": m.old_offset, "new_offset": m.new_offset}
                    for m in moves
                ],
            }
        )
        return
    click.echo(_moves_text(moves))
    if dry_run:
        click.echo("dry run: nothing changed; run it again without --dry-run to apply")
    else:
        click.echo(f"reset group {name} on {topic} ({plural(len(moves), 'queue')})")


@group.command()
@click.argument("name")
@click.option("--force", is_flag=True, help="Delete even while consumers of the group are live.")
@client_command
def delete(
    name: str, force: bool, endpoint: str, credentials: Credentials | None, as_json: bool
) -> None:
    """Delete group NAME: its offsets and deliveries in flight on every topic.

    A group of the same name consumes from the oldest stored message again. Its
    dead-letter topic (%DLQ%NAME) holds messages and is kept.
    """
    with AdminClient(endpoint, credentials=credentials) as admin:
        deleted = admin.delete_consumer_group(name, force=force)
    if as_json:
        echo_json(
            {
                "group": name,
                "topics": list(deleted.topics),
                "kept_dlq_topic": deleted.kept_dlq_topic,
            }
        )
        return
    topics = ", ".join(deleted.topics) or "no topic"
    click.echo(f"deleted group {name} (it had offsets on {topics})")
    if deleted.kept_dlq_topic:
        click.echo(
            f"its dead-letter topic {deleted.kept_dlq_topic} is kept; delete it with "
            f"'skiff topic delete {deleted.kept_dlq_topic}' once you no longer need it"
        )
