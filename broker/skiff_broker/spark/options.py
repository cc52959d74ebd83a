"""The options of the ``skiff`` Spark data source, parsed and checked on the driver.

They mirror the Kafka source's where Spark users know one:

=============================  ===========================================================
``endpoints``                  a broker's ``HOST:PORT`` (several, comma-separated, are
                               tried in order); its route names every group of its
                               cluster, and the source reads the topic on all of them
``topic`` / ``topics``         one topic, or several comma-separated (reads); the topic
                               to write when the data has no ``topic`` column (writes)
``startingOffsets``            ``earliest`` (default), ``latest`` or JSON per queue, each
                               named ``"<group>/<queue ID>"``:
                               ``{"orders": {"broker-a/0": 42, "broker-b/0": -2}}`` (-2
                               earliest, -1 latest); a bare ``"0"`` does while the topic
                               is on one group; queues the JSON leaves out start at the
                               earliest offset
``endingOffsets``              batch reads: ``latest`` (default) or JSON per queue; an
                               exclusive end; queues left out end at the latest offset
``startingTimestamp``,         milliseconds since the epoch: start (end) at the first
``endingTimestamp``            message stored at or after it, in every queue
``startingOffsetsByTimestamp``,  the same per queue, as JSON ``{"orders": {"0": 1700000000000}}``
``endingOffsetsByTimestamp``
``maxOffsetsPerTrigger``       streaming: at most this many messages per micro-batch
``failOnDataLoss``             ``true`` (default): fail when offsets to read were already
                               deleted by retention; ``false``: log a warning, skip them
``pullBatchSize``              messages per fetch (default 8192, at most 65536; a fetch also
                               stops at 4 MiB of records)
``accessKey``, ``secretKey``   sign requests as this user, for brokers with authentication
                               on (reads need Sub on the topics; writes Pub on the topics
                               and Get on them and on ``Cluster``)
=============================  ===========================================================
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from ..client.credentials import Credentials
from ..client.pull_consumer import DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE
from .queue_keys import is_plain_queue_id, split_queue_key

EARLIEST = -2
LATEST = -1


class OptionError(ValueError):
    """An option of the data source is missing or malformed; the message says how to fix it."""


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where to start or end in each queue.

    ``default`` applies to queues ``per_queue`` does not name: EARLIEST or LATEST.
    ``per_queue`` maps topic -> queue key (``"<group>/<queue ID>"``, or a bare queue ID
    where the topic is on one group) -> an offset, EARLIEST or LATEST; with
    ``by_timestamp`` its values (and ``timestamp`` for every queue) are milliseconds.
    """

    default: int
    per_queue: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    timestamp: int | None = None
    by_timestamp: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class SourceOptions:
    endpoints: tuple[str, ...]
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    pull_batch_size: int
    credentials: Credentials | None = None


def _lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    # Spark hands data sources case-insensitive options; be so for plain dicts too.
    return {key.lower(): value for key, value in options.items()}


def parse_credentials(options: Mapping[str, str]) -> Credentials | None:
    lowered = _lower_keys(options)
    try:
        return Credentials.of(lowered.get("accesskey", ""), lowered.get("secretkey", ""))
    except ValueError:
        raise OptionError(
            'set both .option("accessKey", ...) and .option("secretKey", ...), or neither'
        ) from None


def parse_endpoints(options: Mapping[str, str]) -> tuple[str, ...]:
    raw = _lower_keys(options).get("endpoints") or _lower_keys(options).get("endpoint")
    if not raw:
        raise OptionError(
            'the option "endpoints" is missing: set it to the broker\'s HOST:PORT, '
            'e.g. .option("endpoints", "127.0.0.1:8081")'
        )
    endpoints = tuple(e.strip() for e in raw.split(",") if e.strip())
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise OptionError(f"endpoint {endpoint!r} is not HOST:PORT, e.g. 127.0.0.1:8081")
    return endpoints


def _topics(options: dict[str, str]) -> tuple[str, ...]:
    raw = options.get("topics") or options.get("topic") or ""
    topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
    if not topics:
        raise OptionError(
            'no topic to read: set .option("topic", "orders") or .option("topics", "a,b")'
        )
    return topics


def _is_queue_key(key: str) -> bool:
    if is_plain_queue_id(key):
        return True
    try:
        split_queue_key(key)
    except ValueError:
        return False
    return True


def _per_queue_json(name: str, raw: str, topics: tuple[str, ...]) -> dict[str, dict[str, int]]:
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    example = '{"orders": {"broker-a/0": 42, "broker-b/0": -2}}'
    if not isinstance(parsed, dict):
        raise OptionError(f"{name} must be JSON like {example}; got {raw!r}")
    result: dict[str, dict[str, int]] = {}
    for topic, queues in parsed.items():
        if topic not in topics:
            raise OptionError(f"{name} names topic {topic!r}, which is not read (topics: {topics})")
        if not isinstance(queues, dict):
            raise OptionError(f"{name}: the value for {topic!r} must map queues, as in {example}")
        result[topic] = {}
        for queue, value in queues.items():
            if not _is_queue_key(queue) or isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(
                    f'{name}: {topic} {queue!r} must be a queue ("<group>/<queue ID>") '
                    f"mapped to an integer, as in {example}"
                )
            result[topic][queue] = value
    return result


def _offset_spec(options: dict[str, str], side: str, topics: tuple[str, ...]) -> OffsetSpec:
    """``side`` is "starting" or "ending"."""
    default = EARLIEST if side == "starting" else LATEST
    offsets = options.get(f"{side}offsets")
    timestamp = options.get(f"{side}timestamp")
    by_timestamp = options.get(f"{side}offsetsbytimestamp")
    given = [n for n, v in (("Offsets", offsets), ("Timestamp", timestamp)) if v]
    given += ["OffsetsByTimestamp"] if by_timestamp else []
    if len(given) > 1:
        raise OptionError(f"set only one of {', '.join(side + g for g in given)}")
    if timestamp:
        if not timestamp.strip().isdigit():
            raise OptionError(f"{side}Timestamp must be milliseconds since the epoch")
        return OffsetSpec(default, timestamp=int(timestamp), by_timestamp=True)
    if by_timestamp:
        per_queue = _per_queue_json(f"{side}OffsetsByTimestamp", by_timestamp, topics)
        return OffsetSpec(default, per_queue, by_timestamp=True)
    if not offsets:
        return OffsetSpec(default)
    word = offsets.strip().lower()
    if word == "earliest":
        if side == "ending":
            raise OptionError('endingOffsets cannot be "earliest": use "latest" or JSON per queue')
        return OffsetSpec(EARLIEST)
    if word == "latest":
        return OffsetSpec(LATEST)
    per_queue = _per_queue_json(f"{side}Offsets", offsets, topics)
    for topic, queues in per_queue.items():
        for queue, value in queues.items():
            if value < EARLIEST or (side == "ending" and value == EARLIEST):
                raise OptionError(
                    f"{side}Offsets: {topic} {queue} is {value}; use an offset, -1 (latest)"
                    + (" or -2 (earliest)" if side == "starting" else "")
                )
    return OffsetSpec(default, per_queue)


def _positive_int(options: dict[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None or raw == "":
        return None
    if not raw.strip().isdigit() or int(raw) < 1:
        raise OptionError(f"{name} must be a positive integer; got {raw!r}")
    return int(raw)


def _boolean(options: dict[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"{name} must be true or false; got {raw!r}")
    return text == "true"


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    lowered = _lower_keys(options)
    topics = _topics(lowered)
    # The pull consumer's own default: each fetch carries a fixed cost on both ends that
    # small fetches pay again and again.
    batch_size = _positive_int(lowered, "pullBatchSize") or DEFAULT_BATCH_SIZE
    if batch_size > MAX_BATCH_SIZE:
        raise OptionError(f"pullBatchSize must be at most {MAX_BATCH_SIZE}")
    return SourceOptions(
        endpoints=parse_endpoints(options),
        topics=topics,
        starting=_offset_spec(lowered, "starting", topics),
        ending=_offset_spec(lowered, "ending", topics),
        max_offsets_per_trigger=_positive_int(lowered, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_boolean(lowered, "failOnDataLoss", True),
        pull_batch_size=batch_size,
        credentials=parse_credentials(options),
    )
