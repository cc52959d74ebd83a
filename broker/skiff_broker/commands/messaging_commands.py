"""``skiff send`` and ``skiff consume``: the RocketMQ v2 protocol from a shell.

``consume`` acknowledges only what it printed. ``consume --peek`` reads by
offset through the record API and changes no group's position; a consume
without ``--group`` uses a group of its own and deletes it at the end.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

import click

from ..client.admin import AdminClient, ResetTo
from ..client.credentials import Credentials
from ..client.errors import NotFound, SkiffError
from ..client.messaging import MessagingClient, OutgoingMessage, ReceivedMessage, SendReceipt
from ..client.pull_consumer import PullConsumer, PulledMessage
from ..wire.message_size import MAX_MESSAGE_SIZE_OPTION
from .options import Timestamp, client_command
from .output import body_text, echo_json, plural, shown_body

# Messages of one group per SendMessage request: fewer round trips, order kept.
_GROUP_BATCH = 32
# Messages per ReceiveMessage request.
_RECEIVE_BATCH = 32
# A peek with every queue at its end looks again this often until --wait runs out.
_PEEK_IDLE_POLL_S = 0.2

# A message as printed: received for a group, or read by offset (--peek).
Shown = ReceivedMessage | PulledMessage
# One kind of message: a batch printed is acked by the client that received it.
ShownKind = TypeVar("ShownKind", ReceivedMessage, PulledMessage)


def _property(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict:
    properties = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected NAME=VALUE, got {item!r}")
        properties[name] = value
    return properties


def _bodies(body: str | None, body_file: str | None, count: int | None) -> Iterator[bytes]:
    if body is not None or body_file is not None:
        if body_file is not None:
            with open(body_file, "rb") as f:
                payload = f.read()
        else:
            payload = body.encode() if body is not None else b""
        for _ in range(count or 1):
            yield payload
        return
    sent = 0
    for line in sys.stdin.buffer:
        payload = line.rstrip(b"\r\n")
        if not payload:
            continue  # brokers refuse empty bodies
        if count is not None and sent >= count:
            return
        sent += 1
        yield payload


def _batches(items: Iterable[OutgoingMessage], size: int) -> Iterator[list[OutgoingMessage]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _progress(length: int | None, label: str) -> Any:
    """A progress bar on stderr when the run is long and stderr is a terminal."""
    if not length or length <= 1 or not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    return click.progressbar(length=length, label=label, file=sys.stderr, show_pos=True)


@click.command()
@click.option("--topic", required=True)
@click.option("--body", help="Message body (text).")
@click.option("--body-file", type=click.Path(exists=True, dir_okay=False), help="Body from a file.")
@click.option("--tag")
@click.option("--key", "keys", multiple=True, help="Message key (repeatable); indexed for look-up.")
@click.option(
    "--property", "properties", multiple=True, callback=_property, help="NAME=VALUE (repeatable)."
)
@click.option(
    "--count",
    type=click.IntRange(1),
    help="Send the body this many times (with stdin: at most this many lines).",
)
@click.option("--message-group", help="FIFO topics: messages of a group are consumed in order.")
@click.option(
    "--delay-seconds", type=click.FloatRange(0, min_open=True), help="DELAY topics: deliver later."
)
@client_command
def send(
    topic: str,
    body: str | None,
    body_file: str | None,
    tag: str | None,
    keys: tuple[str, ...],
    properties: dict[str, str],
    count: int | None,
    message_group: str | None,
    delay_seconds: float | None,
    endpoint: str,
    credentials: Credentials | None,
    as_json: bool,
) -> None:
    """Send messages to TOPIC: --body, --body-file, or one message per line of stdin.

    Prints each message's ID, queue and queue offset with --json (one JSON object a
    line); otherwise the ID of a single message, or a summary.
    """
    if message_group and delay_seconds:
        raise click.UsageError("a message is FIFO (--message-group) or delayed, not both")
    if body is not None and body_file is not None:
        raise click.UsageError("give either --body or --body-file, not both")
    if body is None and body_file is None and sys.stdin.buffer.isatty():
        raise click.UsageError("give --body or --body-file, or pipe message bodies (one a line)")
    deliver_at = int((time.time() + delay_seconds) * 1000) if delay_seconds else 0
    messages: Iterable[OutgoingMessage] = (
        OutgoingMessage(
            topic=topic,
            body=payload,
            tag=tag or "",
            keys=keys,
            properties=properties,
            message_group=message_group or "",
            deliver_at_ms=deliver_at,
        )
        for payload in _bodies(body, body_file, count)
    )
    # Messages handed to the client so far, for the count on Ctrl-C.
    handed_over = [0]

    def counted(items: Iterable[OutgoingMessage]) -> Iterator[OutgoingMessage]:
        for item in items:
            handed_over[0] += 1
            yield item

    messages = counted(messages)
    total = count if body is not None or body_file is not None else None
    sent: list[str] = []
    last_offset = 0
    with (
        MessagingClient(endpoint, credentials=credentials) as client,
        _QueueLookup(endpoint, credentials, topic) as queues,
        _progress(total, "sending") as bar,
    ):
        if message_group:
            # One queue holds the group; ordered requests keep its order there.
            receipts: Iterable[SendReceipt] = itertools.chain.from_iterable(
                client.send(batch) for batch in _batches(messages, _GROUP_BATCH)
            )
        else:
            receipts = client.send_each(messages)
        try:
            for receipt in receipts:
                sent.append(receipt.message_id)
                last_offset = receipt.offset
                if as_json:
                    echo_json(
                        {
                            "topic": topic,
                            "message_id": receipt.message_id,
                            "queue_id": queues.queue_id(receipt.message_id),
                            "offset": receipt.offset,
                        }
                    )
                if bar is not None:
                    bar.update(1)
        except SkiffError as exc:
            exc.message += _next_step(exc, message_group)
            if sent:
                exc.message += f" ({plural(len(sent), 'message')} were sent before)"
            raise
        except KeyboardInterrupt:
            # A receipt means stored; requests still unanswered may be stored too.
            in_flight = handed_over[0] - len(sent)
            click.echo(
                f"\ninterrupted: {plural(len(sent), 'message')} stored in {topic}"
                + (f"; {in_flight} more sent, unanswered, may be stored too" if in_flight else ""),
                err=True,
            )
            sys.exit(INTERRUPTED_EXIT_CODE)
        if as_json:
            return
        if len(sent) == 1:
            queue_id = queues.queue_id(sent[0])
            queue = "" if queue_id is None else f"queue {queue_id}, "
            click.echo(f"sent {sent[0]} to {topic} ({queue}queue offset {last_offset})")
        else:
            click.echo(f"sent {plural(len(sent), 'message')} to {topic}")


# A shell's code for a command ended by SIGINT (128 + 2).
INTERRUPTED_EXIT_CODE = 130


def _next_step(exc: SkiffError, message_group: str | None) -> str:
    """What fixes a refused send, for the refusals a sender can fix from here."""
    if exc.code == "MESSAGE_BODY_TOO_LARGE":
        if MAX_MESSAGE_SIZE_OPTION.name in exc.message:
            return f" ({MAX_MESSAGE_SIZE_OPTION.env})"  # the broker said what to do
        return (
            "; send a smaller body, or start the broker with a larger "
            f"{MAX_MESSAGE_SIZE_OPTION.name} ({MAX_MESSAGE_SIZE_OPTION.env})"
        )
    if "accepts FIFO messages" in exc.message and not message_group:
        return "; give the message a --message-group (its messages are consumed in order)"
    return ""


class _QueueLookup:
    """The queue each message just sent went to, looked up by message id (through one
    admin connection, opened at the first look-up): the RocketMQ v2 send result carries
    no queue id. None where the broker does not say (a delayed message waits in the
    schedule topic until it is due)."""

    def __init__(self, endpoint: str, credentials: Credentials | None, topic: str) -> None:
        self._endpoint = endpoint
        self._credentials = credentials
        self._topic = topic
        self._admin: Any = None

    def __enter__(self) -> _QueueLookup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._admin is not None:
            self._admin.close()

    def queue_id(self, message_id: str) -> int | None:
        from ..client.admin import AdminClient

        try:
            if self._admin is None:
                self._admin = AdminClient(self._endpoint, credentials=self._credentials, timeout=5)
            return self._admin.lookup_message(self._topic, message_id).queue_id
        except SkiffError:
            return None


class StartPosition(click.ParamType):
    """``earliest``, ``latest``, or a time (milliseconds since the epoch or ISO 8601)."""

    name = "earliest|latest|time"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> str | int:
        if isinstance(value, int) or value in ("earliest", "latest"):
            return value
        text = str(value).strip().lower()
        if text in ("earliest", "latest"):
            return text
        return Timestamp().convert(value, param, ctx)


def _reset_to(position: str | int) -> dict[str, Any]:
    """Keyword arguments of ``AdminClient.reset_consumer_group`` for a start position."""
    if position == "earliest":
        return {"to": ResetTo.EARLIEST}
    if position == "latest":
        return {"to": ResetTo.LATEST}
    return {"to": ResetTo.TIMESTAMP, "timestamp_ms": int(position)}


@click.command()
@click.option(
    "--group",
    help="Consumer group; it keeps its own position. Without it a throwaway group is "
    "used and deleted at the end.",
)
@click.option("--topic", required=True)
@click.option("--tag-filter", default="*", show_default=True, help="'*' or 'TagA || TagB'.")
@click.option(
    "--count", type=click.IntRange(1), help="Stop after this many messages (default: no limit)."
)
@click.option(
    "--wait",
    type=click.FloatRange(0),
    default=5.0,
    show_default=True,
    help="Stop after this many seconds without a new message.",
)
@click.option(
    "--peek",
    is_flag=True,
    help="Read by offset without a group and without acknowledging anything.",
)
@click.option(
    "--from",
    "start",
    type=StartPosition(),
    help="Start at earliest, latest, or a time; with --group this resets the group's "
    "position first (default: where the group is; earliest for --peek and throwaway groups).",
)
@click.option("--from-beginning", is_flag=True, help="Same as --from earliest.")
@client_command
def consume(
    group: str | None,
    topic: str,
    tag_filter: str,
    count: int | None,
    wait: float,
    peek: bool,
    start: str | int | None,
    from_beginning: bool,
    endpoint: str,
    credentials: Credentials | None,
    as_json: bool,
) -> None:
    """Receive messages of TOPIC for GROUP, print them and acknowledge them.

    Bodies print as text when they are UTF-8, else as base64. A body flagged
    compressed that does not inflate prints as stored, with a warning. A message
    is acknowledged after it is printed, so an interrupted run may print some
    messages again next time, never lose them. With --peek nothing is
    acknowledged and no group is involved.
    """
    if from_beginning:
        if start is not None and start != "earliest":
            raise click.UsageError("--from-beginning is --from earliest; give one of them")
        start = "earliest"
    if peek:
        if group:
            raise click.UsageError("--peek reads without a group; leave out --group")
        received = _peek(endpoint, credentials, topic, tag_filter, count, wait, start, as_json)
        click.echo(
            f"peeked at {plural(received, 'message')} of {topic}; none acknowledged", err=True
        )
        return
    throwaway = not group
    group = group or f"skiff-consume-{uuid.uuid4().hex[:12]}"
    # Whether the broker answered a call that made the group: only then is a failed
    # deletion of the throwaway group worth a warning.
    made = [False]
    try:
        if start is not None:
            with AdminClient(endpoint, credentials=credentials) as admin:
                admin.reset_consumer_group(group, topic, **_reset_to(start))
            made[0] = True
        received = _consume(
            endpoint, credentials, group, topic, tag_filter, count, wait, as_json, made
        )
    finally:
        if throwaway:
            _delete_throwaway(endpoint, credentials, group, warn=made[0])
    kept = " (throwaway, deleted)" if throwaway else ""
    click.echo(
        f"consumed {plural(received, 'message')} of {topic} for group {group}{kept}", err=True
    )


def _consume(
    endpoint: str,
    credentials: Credentials | None,
    group: str,
    topic: str,
    tag_filter: str,
    count: int | None,
    wait: float,
    as_json: bool,
    made: list[bool],
) -> int:
    """Receive, print and ack; ``made[0]`` is set once the broker answered a receive."""
    received = 0
    with (
        MessagingClient(endpoint, credentials=credentials) as client,
        _progress(count, "consuming") as bar,
    ):
        idle_until = time.monotonic() + wait
        while count is None or received < count:
            remaining = max(0.0, idle_until - time.monotonic())
            wanted = _RECEIVE_BATCH if count is None else min(_RECEIVE_BATCH, count - received)
            batch = client.receive(
                group, topic, max_messages=wanted, tag_expression=tag_filter, wait_s=remaining
            )
            made[0] = True
            if not batch:
                if remaining <= 0:
                    break
                continue
            printed = _print_messages(batch, as_json)
            client.ack(group, topic, printed)
            received += len(printed)
            if len(printed) < len(batch):
                _stop_writing_stdout()
                break
            if bar is not None:
                bar.update(len(batch))
            idle_until = time.monotonic() + wait
    return received


def _delete_throwaway(
    endpoint: str, credentials: Credentials | None, group: str, *, warn: bool
) -> None:
    """Delete the throwaway group; a failure is reported only if the group was made
    (``warn``): a run that never reached the broker left nothing to delete, and its
    own error says why."""
    try:
        with AdminClient(endpoint, credentials=credentials) as admin:
            admin.delete_consumer_group(group, force=True)
    except NotFound:
        pass  # it never consumed anything
    except SkiffError as exc:
        if not warn:
            return
        click.echo(
            f"warning: could not delete the throwaway group {group}: {exc.message}; "
            f"delete it with 'skiff group delete {group}'",
            err=True,
        )


def _peek(
    endpoint: str,
    credentials: Credentials | None,
    topic: str,
    tag_filter: str,
    count: int | None,
    wait: float,
    start: str | int | None,
    as_json: bool,
) -> int:
    """Print messages read by offset, queue after queue in turns; how many were printed."""
    received = 0
    with PullConsumer(endpoint, credentials=credentials) as reader:
        queue_ids = reader.queue_ids(topic)
        position = {q: _peek_start(reader, topic, q, start or "earliest") for q in queue_ids}
        idle_until = time.monotonic() + wait
        while count is None or received < count:
            found = False
            for queue_id in queue_ids:
                wanted = _RECEIVE_BATCH if count is None else min(_RECEIVE_BATCH, count - received)
                if wanted <= 0:
                    break
                result = reader.pull(
                    topic,
                    queue_id,
                    position[queue_id],
                    max_messages=wanted,
                    tag_expression=tag_filter,
                )
                position[queue_id] = result.next_offset
                if not result.messages:
                    continue
                found = True
                printed = _print_messages(result.messages, as_json)
                received += len(printed)
                if len(printed) < len(result.messages):
                    _stop_writing_stdout()
                    return received
            if found:
                idle_until = time.monotonic() + wait
                continue
            remaining = idle_until - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(_PEEK_IDLE_POLL_S, remaining))
    return received


def _peek_start(reader: PullConsumer, topic: str, queue_id: int, start: str | int) -> int:
    if start == "earliest":
        return reader.min_offset(topic, queue_id)
    if start == "latest":
        return reader.max_offset(topic, queue_id)
    return reader.offset_for_time(topic, queue_id, int(start))


def _print_messages(batch: Sequence[ShownKind], as_json: bool) -> list[ShownKind]:
    """The messages printed; fewer than given when the reader went away (``| head``)."""
    printed: list[ShownKind] = []
    for message in batch:
        try:
            if as_json:
                echo_json(_received_json(message))
            else:
                click.echo(_received_text(message))
            sys.stdout.flush()
        except BrokenPipeError:
            break  # not printed, so not acked: it is delivered again later
        printed.append(message)
    return printed


def _stop_writing_stdout() -> None:
    # Python would report the closed pipe again when it flushes stdout at exit.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _received_json(message: Shown) -> dict[str, Any]:
    body, encoding = body_text(message.body)
    return {
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "message_id": message.message_id,
        "tag": message.tag,
        "keys": list(message.keys),
        "message_group": message.message_group,
        "properties": message.properties,
        "born_timestamp": message.born_timestamp,
        "store_timestamp": message.store_timestamp,
        # 0 for a peek: nothing was delivered.
        "delivery_attempt": getattr(message, "delivery_attempt", 0),
        "body": body,
        "body_encoding": encoding,
        # Set when the body is as stored: flagged compressed, it does not inflate.
        "body_problem": getattr(message, "body_problem", ""),
    }


def _received_text(message: Shown) -> str:
    details = [f"[{message.topic} {message.queue_id}:{message.queue_offset}] {message.message_id}"]
    if message.tag:
        details.append(f"tag {message.tag}")
    if message.keys:
        details.append(f"keys {' '.join(message.keys)}")
    if message.message_group:
        details.append(f"group {message.message_group}")
    if message.properties:
        details.append(" ".join(f"{k}={v}" for k, v in sorted(message.properties.items())))
    attempt = getattr(message, "delivery_attempt", 0)
    if attempt > 1:
        details.append(f"attempt {attempt}")
    if problem := getattr(message, "body_problem", ""):
        details.append(f"body as stored: {problem}")
    return "  ".join(details) + "\n" + shown_body(message.body)
