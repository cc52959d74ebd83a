"""``skiff admin info|offsets|lag|lookup|query-key|offset-by-time|promote|user|acl``."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from ..client.admin import AdminClient, BrokerInfo, StoredMessage
from ..client.credentials import Credentials
from ..wire import property_names as prop
from .auth_commands import acl, user
from .options import Timestamp, client_command
from .output import body_text, echo_json, fields, plural, shown_body, table, time_text


@click.group()
def admin() -> None:
    """Inspect a broker: its state, queue offsets, consumer lag, messages; users and ACLs."""


admin.add_command(user)
admin.add_command(acl)


@admin.command()
@client_command
def info(endpoint: str, credentials: Credentials | None, as_json: bool) -> None:
    """The broker's role, store offsets, flushing and disk state."""
    with AdminClient(endpoint, credentials=credentials) as client:
        state = client.broker_info()
    if as_json:
        echo_json(dataclasses.asdict(state))
        return
    click.echo(
        fields(
            [
                ("broker", state.broker_name),
                ("role", state.role),
                ("version", state.version),
                ("endpoint", state.endpoint),
                ("remoting endpoint", state.remoting_endpoint or None),
                ("flush type", state.flush_type),
                ("transient store pool", state.transient_store_pool),
                ("commit log", f"{state.commit_log_min_offset} .. {state.commit_log_max_offset}"),
                ("committed offset", state.committed_offset),
                ("flushed offset", state.flushed_offset),
                ("dispatched offset", state.dispatched_offset),
                ("disk used", f"{state.disk_use_ratio:.1%}"),
                ("writable", state.writable),
                *([("refusal", state.refusal)] if state.refusal else []),
                ("replication", state.replication_mode or None),
                ("epoch", f"{state.epoch} (from offset {state.epoch_start_offset})"),
                *_replication_fields(state),
            ]
        )
    )
    if state.replicas:
        click.echo()
        click.echo(
            table(
                ["REPLICA", "ADDRESS", "ACKED OFFSET", "LAG BYTES", "IN SYNC", "CONNECTED"],
                [
                    [r.name, r.address, r.acked_offset, r.lag_bytes, r.in_sync, r.connected]
                    for r in state.replicas
                ],
            )
        )


def _replication_fields(state: BrokerInfo) -> list[tuple[str, Any]]:
    if state.master_address:
        lag = "never heard from" if state.replica_lag_bytes < 0 else state.replica_lag_bytes
        return [
            ("master", state.master_address),
            ("connected", state.replica_connected),
            ("in sync", state.replica_in_sync),
            ("lag bytes", lag),
        ]
    if state.ha_address:
        return [("replication address", state.ha_address), ("replicas", len(state.replicas))]
    return []


@admin.command()
@click.option(
    "--force",
    is_flag=True,
    help="Promote even a replica that is not in sync (it may lack acknowledged messages); "
    "refused while its master still answers.",
)
@click.option(
    "--ha-listen",
    default="",
    help="HOST:PORT where the new master serves replication (default: its --ha-listen).",
)
@client_command
def promote(
    force: bool, ha_listen: str, endpoint: str, credentials: Credentials | None, as_json: bool
) -> None:
    """Make the replica at --endpoint the master of its group (kept across its restarts)."""
    with AdminClient(endpoint, credentials=credentials) as client:
        result = client.promote(force=force, ha_listen=ha_listen)
    if as_json:
        echo_json(dataclasses.asdict(result))
        return
    click.echo(
        f"{endpoint} is now {result.role}, epoch {result.epoch} from offset "
        f"{result.epoch_start_offset}; serving replication on {result.ha_address}"
    )


@admin.command()
@click.option("--topic", required=True)
@client_command
def offsets(topic: str, endpoint: str, credentials: Credentials | None, as_json: bool) -> None:
    """Each queue's min and max offset (max: where the next message goes)."""
    with AdminClient(endpoint, credentials=credentials) as client:
        queues = client.queue_offsets(topic)
    if as_json:
        echo_json({"topic": topic, "queues": [dataclasses.asdict(q) for q in queues]})
        return
    click.echo(
        table(
            ["QUEUE", "MIN OFFSET", "MAX OFFSET", "MESSAGES"],
            [[q.queue_id, q.min_offset, q.max_offset, q.max_offset - q.min_offset] for q in queues],
        )
    )


@admin.command()
@click.option("--group", required=True, help="Consumer group.")
@click.option("--topic", required=True)
@client_command
def lag(
    group: str, topic: str, endpoint: str, credentials: Credentials | None, as_json: bool
) -> None:
    """How many messages of TOPIC the consumer GROUP has not consumed, per queue."""
    with AdminClient(endpoint, credentials=credentials) as client:
        result = client.consumer_lag(group, topic)
    if as_json:
        echo_json(dataclasses.asdict(result))
        return
    click.echo(
        table(
            ["QUEUE", "BROKER OFFSET", "CONSUMER OFFSET", "LAG"],
            [[q.queue_id, q.broker_offset, q.consumer_offset, q.lag] for q in result.queues],
        )
    )
    click.echo(f"total lag of group {group} on {topic}: {result.total_lag}")


@admin.command()
@click.option("--topic", required=True)
@click.argument("message_id")
@client_command
def lookup(
    topic: str, message_id: str, endpoint: str, credentials: Credentials | None, as_json: bool
) -> None:
    """Show the message with MESSAGE_ID (as producers and consumers see it)."""
    with AdminClient(endpoint, credentials=credentials) as client:
        message = client.lookup_message(topic, message_id)
    if as_json:
        echo_json(message_json(message))
    else:
        click.echo(_message_text(message))


@admin.command("query-key")
@click.option("--topic", required=True)
@click.argument("key")
@click.option("--begin", type=Timestamp(), default=0, help="Stored at or after (ms or ISO time).")
@click.option("--end", type=Timestamp(), default=0, help="Stored at or before (ms or ISO time).")
@click.option("--max", "max_messages", type=click.IntRange(1, 1000), default=32, show_default=True)
@client_command
def query_key(
    topic: str,
    key: str,
    begin: int,
    end: int,
    max_messages: int,
    endpoint: str,
    credentials: Credentials | None,
    as_json: bool,
) -> None:
    """Show messages of TOPIC with message key KEY, newest first."""
    with AdminClient(endpoint, credentials=credentials) as client:
        found = client.query_messages_by_key(
            topic, key, begin_ms=begin, end_ms=end, max_messages=max_messages
        )
    if as_json:
        echo_json([message_json(m) for m in found])
        return
    click.echo("\n\n".join(_message_text(m) for m in found))
    click.echo(f"{plural(len(found), 'message')} with key {key!r} in {topic}", err=True)


@admin.command("offset-by-time")
@click.option("--topic", required=True)
@click.option("--time", "at", type=Timestamp(), required=True, help="ms since epoch or ISO time.")
@click.option("--queue", "queue_id", type=click.IntRange(0), help="One queue (default: all).")
@client_command
def offset_by_time(
    topic: str,
    at: int,
    queue_id: int | None,
    endpoint: str,
    credentials: Credentials | None,
    as_json: bool,
) -> None:
    """The first offset of each queue stored at or after --time (where to start reading)."""
    with AdminClient(endpoint, credentials=credentials) as client:
        queue_ids = (
            [queue_id]
            if queue_id is not None
            else [q.queue_id for q in client.queue_offsets(topic)]
        )
        found = [(q, client.offset_by_time(topic, q, at)) for q in queue_ids]
    if as_json:
        echo_json(
            {
                "topic": topic,
                "timestamp": at,
                "queues": [{"queue_id": q, "offset": offset} for q, offset in found],
            }
        )
        return
    click.echo(f"first offsets stored at or after {time_text(at, unset='epoch')}:")
    click.echo(table(["QUEUE", "OFFSET"], [[q, offset] for q, offset in found]))


def message_json(message: StoredMessage) -> dict[str, Any]:
    body, encoding = body_text(message.body)
    document = dataclasses.asdict(message)
    document.update(keys=list(message.keys), body=body, body_encoding=encoding)
    return document


def _message_text(message: StoredMessage) -> str:
    user = {k: v for k, v in message.properties.items() if k not in prop.RESERVED}
    return fields(
        [
            ("message", message.message_id),
            ("topic", message.topic),
            ("queue", f"{message.queue_id} offset {message.queue_offset}"),
            ("commit log offset", message.physical_offset),
            ("tag", message.tag or None),
            ("keys", " ".join(message.keys) or None),
            ("properties", " ".join(f"{k}={v}" for k, v in sorted(user.items())) or None),
            ("born", f"{time_text(message.born_timestamp)} at {message.born_host}"),
            ("stored", f"{time_text(message.store_timestamp)} at {message.store_host}"),
            ("reconsumed", message.reconsume_times),
            ("body", shown_body(message.body)),
        ]
    )
