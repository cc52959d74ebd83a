"""The ``skiff`` command."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading

import click

from . import __version__
from .logs import configure_logging
from .store.config import FlushType, StoreConfig

log = logging.getLogger("skiff")

_SIZE_SUFFIXES = {"k": 1024, "m": 1024**2, "g": 1024**3}


class ByteSize(click.ParamType):
    """``1073741824``, ``1g``, ``256m`` or ``64k``."""

    name = "size"

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().removesuffix("ib").removesuffix("b")
        factor = _SIZE_SUFFIXES.get(text[-1:], 1)
        number = text[:-1] if text[-1:] in _SIZE_SUFFIXES else text
        try:
            return int(float(number) * factor)
        except ValueError:
            self.fail(f"{value!r} is not a size like 1g, 256m or 65536", param, ctx)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="skiff")
@click.option(
    "--log-level",
    envvar="SKIFF_LOG_LEVEL",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def main(log_level: str) -> None:
    """Skiff: a RocketMQ-compatible message broker."""
    configure_logging(log_level)


@main.command()
@click.option(
    "--data-dir",
    envvar="SKIFF_DATA_DIR",
    default="./skiff-data",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where the commit log, queues, index and config live.",
)
@click.option(
    "--flush-type",
    envvar="SKIFF_FLUSH_TYPE",
    type=click.Choice([t.value for t in FlushType]),
    default=FlushType.ASYNC_FLUSH.value,
    show_default=True,
    help="SYNC_FLUSH acknowledges a write once it is on disk (group commit).",
)
@click.option(
    "--transient-store-pool/--no-transient-store-pool",
    envvar="SKIFF_TRANSIENT_STORE_POOL",
    default=False,
    show_default=True,
    help="Append into memory buffers committed to the file in the background (ASYNC_FLUSH).",
)
@click.option(
    "--commit-log-file-size",
    envvar="SKIFF_COMMIT_LOG_FILE_SIZE",
    type=ByteSize(),
    default="1g",
    show_default=True,
    help="Size of each pre-allocated commit-log segment.",
)
@click.option(
    "--max-message-size",
    envvar="SKIFF_MAX_MESSAGE_SIZE",
    type=ByteSize(),
    default="4m",
    show_default=True,
)
@click.option(
    "--file-reserved-hours",
    envvar="SKIFF_FILE_RESERVED_HOURS",
    type=float,
    default=72.0,
    show_default=True,
    help="Delete commit-log segments older than this.",
)
@click.option(
    "--delete-when",
    envvar="SKIFF_DELETE_WHEN",
    default="04",
    show_default=True,
    help="Hours at which old segments are deleted, e.g. 04 or 04;16.",
)
@click.option(
    "--sync-flush-timeout",
    envvar="SKIFF_SYNC_FLUSH_TIMEOUT",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds a SYNC_FLUSH write waits for the disk before FLUSH_DISK_TIMEOUT.",
)
@click.option(
    "--store-host",
    envvar="SKIFF_STORE_HOST",
    default="127.0.0.1:10911",
    show_default=True,
    help="Address recorded in every message's STOREHOST field.",
)
def broker(
    data_dir: str,
    flush_type: str,
    transient_store_pool: bool,
    commit_log_file_size: int,
    max_message_size: int,
    file_reserved_hours: float,
    delete_when: str,
    sync_flush_timeout: float,
    store_host: str,
) -> None:
    """Run a broker on a local data directory until SIGTERM or Ctrl-C."""
    from .runtime import Broker
    from .store.errors import StoreError

    config = StoreConfig(
        data_dir=os.path.abspath(data_dir),
        flush_type=FlushType(flush_type),
        transient_store_pool_enable=transient_store_pool,
        commit_log_file_size=commit_log_file_size,
        max_message_size=max_message_size,
        file_reserved_time_hours=file_reserved_hours,
        delete_when=delete_when,
        sync_flush_timeout=sync_flush_timeout,
        store_host=store_host,
    )
    try:
        config.validate()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    node = Broker(config)
    try:
        node.start()
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    log.info("broker ready: data in %s, %s", config.data_dir, config.flush_type)
    stop.wait()
    log.info("stopping")
    node.stop()


@main.group()
def store() -> None:
    """Inspect a data directory offline."""


@store.command("check")
@click.option(
    "--data-dir",
    envvar="SKIFF_DATA_DIR",
    default="./skiff-data",
    show_default=True,
    type=click.Path(file_okay=False, exists=True),
)
@click.option(
    "--commit-log-file-size", envvar="SKIFF_COMMIT_LOG_FILE_SIZE", type=ByteSize(), default="1g"
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def store_check(data_dir: str, commit_log_file_size: int, as_json: bool) -> None:
    """Verify every commit-log record (length, magic, offset, body CRC).

    Exits 1 if a record fails; reports where valid data ends.
    """
    from .store.mapped_file_queue import MappedFileQueue
    from .store.recovery import scan_segment

    queue = MappedFileQueue(os.path.join(data_dir, "commitlog"), commit_log_file_size)
    queue.load()
    records = 0
    problem = None
    end = 0
    files = queue.files
    with click.progressbar(
        files, label="checking segments", file=sys.stderr, show_pos=True
    ) as segments:
        for mf in segments:
            position, count, problem, blank = scan_segment(mf, 0, check_crc=True)
            records += count
            end = mf.file_from_offset + (mf.file_size if blank else position)
            if not blank:
                break
    queue.close()
    result = {"segments": len(files), "records": records, "valid_end": end, "problem": problem}
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(f"{records} records in {len(files)} segments; valid data ends at {end}")
        if problem:
            click.echo(f"problem: {problem}")
    sys.exit(1 if problem else 0)
