"""The ``skiff`` command."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from . import __version__, offline_users
from .broker_options import ByteSize, broker_config, declared, with_broker_options
from .commands import register as register_client_commands
from .config import BrokerConfig
from .logs import configure_logging
from .port_check import PortUnavailable, check_can_listen
from .store.config import StoreConfig
from .store.private_files import umask_for

if TYPE_CHECKING:
    from .assembly.broker_server import BrokerServer
    from .store.store_check import CheckOutcome, RepairOutcome

log = logging.getLogger("skiff")


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
@with_broker_options
def broker(**options: Any) -> None:
    """Run a broker on a local data directory until SIGTERM or Ctrl-C.

    A start that fails prints one line saying why and what to do, and exits 1.
    """
    import uvloop

    from .assembly.broker_server import BrokerServer
    from .ha.replica_book import ReplicaBookError
    from .ha.role_file import RoleFileError
    from .ha.successor_check import SupersededMaster
    from .metadata.state_file import StateFileError
    from .store.errors import StoreError

    config: BrokerConfig = broker_config(options)
    config.replication.secret = _ha_secret(config.replication.secret_file)
    config.auth.init_user = _init_user(config.auth.init_user, config.auth.init_user_file)
    config.store.store_host = config.advertised_endpoint or _store_host(config.listen)
    config.metrics_listen = config.metrics_listen.strip()
    config.cluster.pod_name = config.cluster.pod_name or _pod_name()
    try:
        config.replication.resolve_role(config.cluster.pod_name)
        config.validate()
        # What the broker creates without an explicit mode is private too (private_files.py).
        os.umask(umask_for(config.store.data_dir_gid))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        # Before the data directory is opened: a busy port then changes nothing on disk.
        for address, option in _addresses_to_serve(config):
            check_can_listen(address, option)
    except PortUnavailable as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(USAGE_EXIT_CODE)
    try:
        server = BrokerServer(config)
        # uvloop: the event loop's own work (socket callbacks, timers, wake-ups, TLS) in
        # native code; the client port's gRPC server runs on it.
        uvloop.run(server.serve_until_signalled(on_listening=lambda: _announce(server)))
    except (
        StoreError,
        OSError,
        StateFileError,
        RoleFileError,
        ReplicaBookError,
        SupersededMaster,
    ) as exc:
        raise click.ClickException(_one_line(str(exc))) from exc
    except Exception as exc:
        # Anything else is a fault of the broker: one line here, the traceback at DEBUG.
        log.debug("the broker stopped on an unexpected error", exc_info=True)
        raise click.ClickException(
            f"the broker stopped on an unexpected error: {type(exc).__name__}: "
            f"{_one_line(str(exc))} (run with --log-level DEBUG for the traceback, and "
            "report it)"
        ) from exc


def _ha_secret(path: str) -> bytes:
    """The replication secret: the file's contents, else SKIFF_HA_SECRET (surrounding
    whitespace dropped, so a trailing newline does not matter)."""
    if not path:
        return os.environ.get("SKIFF_HA_SECRET", "").strip().encode()
    try:
        with open(path, "rb") as secret_file:
            return secret_file.read().strip()
    except OSError as exc:
        raise click.UsageError(
            f"cannot read --ha-secret-file {path}: {exc.strerror}; check the path and that "
            "this user may read it"
        ) from None


def _init_user(given: str, path: str) -> str:
    """The bootstrap super user: --auth-init-user, else the contents of its file."""
    if given and click.get_current_context().get_parameter_source("auth_init_user") is (
        click.core.ParameterSource.COMMANDLINE
    ):
        log.warning(
            "--auth-init-user on the command line shows its secret to every user of this "
            "machine (ps); give it in SKIFF_AUTH_INIT_USER or --auth-init-user-file instead"
        )
    if not path:
        return given
    if given:
        raise click.UsageError("give --auth-init-user or --auth-init-user-file, not both")
    try:
        with open(path, encoding="utf-8") as spec_file:
            return spec_file.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise click.UsageError(
            f"cannot read --auth-init-user-file {path}: {reason}; check the path and that "
            "this user may read it"
        ) from None


# click's code for a usage error: the command line (here an address) must change.
USAGE_EXIT_CODE = 2


def _addresses_to_serve(config: BrokerConfig) -> list[tuple[str, str]]:
    """Each address the broker will listen on at start, with the option that sets it."""
    from .ha.config import Role

    addresses = [(config.listen, "--listen")]
    if config.cluster.external_listen:
        addresses.append((config.cluster.external_listen, "--external-listen"))
    if config.metrics_listen:
        addresses.append((config.metrics_listen, "--metrics-listen"))
    if config.remoting_enabled:
        addresses.append((config.remoting_listen, "--remoting-listen"))
    # A master serves replication from the start; other roles only once promoted.
    if config.replication.role is Role.MASTER and config.replication.ha_listen:
        addresses.append((config.replication.ha_listen, "--ha-listen"))
    return addresses


def _announce(server: BrokerServer) -> None:
    """Where the broker is and what to try next: a banner on a terminal, else a log line."""
    # A wildcard listen address is reached on this host at 127.0.0.1.
    endpoint = _store_host(server.address)
    data_dir = server.config.store.data_dir
    role, steps = _next_steps(server, endpoint)
    if sys.stderr.isatty():
        tried = "\n".join(
            f"  {'try next:' if n == 0 else '':<17}{step}" for n, step in enumerate(steps)
        )
        click.echo(
            f"\nSkiff broker {__version__} is ready{role}\n"
            f"  endpoint:        {endpoint}\n"
            f"  data directory:  {data_dir}\n"
            f"{tried}\n"
            "  stop with Ctrl-C\n",
            err=True,
        )
    else:
        log.info(
            "ready%s: endpoint %s, data directory %s; try: %s",
            role,
            endpoint,
            data_dir,
            steps[0],
        )


def _next_steps(server: BrokerServer, endpoint: str) -> tuple[str, list[str]]:
    """How the banner names the broker's role, and the commands that work on it now.

    A replica refuses topic changes and sends (they are its master's), so it is offered
    reads only.
    """
    if server.replication.is_replica:
        master = server.config.replication.master_address
        return (
            f" as a replica of {master} (it takes topics and messages from its master: "
            "create topics and send there; read here)",
            [
                f"skiff topic list --endpoint {endpoint}",
                f"skiff consume --topic NAME --peek --endpoint {endpoint}",
            ],
        )
    return "", [
        f"skiff topic create demo --endpoint {endpoint}",
        f"skiff send --topic demo --body hello --endpoint {endpoint}",
    ]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _pod_name() -> str:
    """The StatefulSet pod's name, for --role AUTO."""
    import socket

    return os.environ.get("SKIFF_POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname()


def _store_host(listen: str) -> str:
    """STOREHOST for records: the listen address, with a wildcard host made concrete."""
    host, _, port = listen.rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"{host}:{port or 0}"


register_client_commands(main)


@main.group()
def store() -> None:
    """Inspect a data directory offline; edit a stopped broker's users."""


store.add_command(offline_users.user)


# The broker's names and default for the same settings.
_DATA_DIR = declared(StoreConfig, "data_dir")
_COMMIT_LOG_FILE_SIZE = declared(StoreConfig, "commit_log_file_size")


@store.command("check")
@click.option(
    _DATA_DIR.name,
    envvar=_DATA_DIR.env,
    default=StoreConfig().data_dir,
    show_default=True,
    type=click.Path(file_okay=False, exists=True),
)
@click.option(
    _COMMIT_LOG_FILE_SIZE.name,
    envvar=_COMMIT_LOG_FILE_SIZE.env,
    type=ByteSize(),
    default=None,
    help="Segment size; read from the segment files when left out.",
)
@click.option(
    "--repair",
    is_flag=True,
    help="Recover the stopped directory as after a crash: skip damaged records, cut a torn "
    "tail, rebuild consume-queue units that disagree with the log.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def store_check(
    data_dir: str, commit_log_file_size: int | None, repair: bool, as_json: bool
) -> None:
    """Verify every commit-log record and consume-queue unit; show the damage report.

    Exits 1 if it finds damage not yet handled (in the report), a torn tail or
    consume-queue units that disagree with the log; --repair fixes those.
    """
    from .store import store_check as checker
    from .store.errors import StoreError

    try:
        if repair:
            repaired = checker.repair(data_dir, commit_log_file_size)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if repair and not as_json:
        _print_repair(repaired)
    try:
        outcome = checker.check(data_dir, commit_log_file_size)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        result = outcome.as_json()
        if repair:
            result["repair"] = repaired.as_json()
        click.echo(json.dumps(result))
    else:
        _print_check(outcome)
    sys.exit(0 if outcome.ok else 1)


def _print_repair(repaired: RepairOutcome) -> None:
    click.echo(
        f"repair: commit log ends at {repaired.end}" + (" (torn tail cut)" if repaired.cut else "")
    )
    for d in repaired.skipped:
        click.echo(f"repair: skipped {d['length']} bytes at {d['offset']}: {d['reason']}")
    click.echo(
        f"repair: {repaired.units_bad} consume-queue unit(s) disagreed with the log, "
        f"{repaired.units_rebuilt} rebuilt, {repaired.units_bad - repaired.units_rebuilt} "
        "left as holes readers step over"
    )
    if repaired.index_left_to_next_start:
        click.echo("repair: the index is rebuilt by the broker's next start")


def _print_check(outcome: CheckOutcome) -> None:
    if outcome.live:
        click.echo(
            "note: a running broker holds this directory (its lock file): the check read it "
            "while the broker writes, so a torn tail or disagreeing units at the newest "
            "records may be writes in flight, not damage. Stop the broker for an exact "
            "check; --repair needs it stopped."
        )
    click.echo(
        f"{outcome.records} records in {outcome.segments} segments of {outcome.segment_size} "
        f"bytes; valid data ends at {outcome.valid_end}"
    )
    if outcome.problem:
        click.echo(f"problem: torn tail, {outcome.problem}; run with --repair to cut it")
    for d in outcome.damaged:
        state = "in the report" if d["known"] else "NEW, run with --repair to record it"
        click.echo(f"damaged: {d['length']} bytes at {d['offset']} ({state}): {d['reason']}")
    click.echo(f"{outcome.units_checked} consume-queue units checked against the log")
    for queue, count in outcome.bad_units.items():
        click.echo(f"problem: {count} unit(s) of {queue} disagree with the log; run with --repair")
    if outcome.report:
        click.echo(f"damage report ({len(outcome.report)} entries):")
        for e in outcome.report:
            if e.get("kind") == "skipped":
                click.echo(
                    f"  {e['at']} {e['found_by']}: skipped {e['records']} record(s), "
                    f"{e['length']} bytes at {e['offset']} ({e['reason']}); copy in {e['copy']}"
                )
            elif e.get("kind") == "consume-queue":
                click.echo(
                    f"  {e['at']} {e['found_by']}: {e['topic']}/{e['queue_id']}: "
                    f"{e['bad_units']} bad unit(s), {e['rebuilt']} rebuilt, {e['holes']} holes "
                    f"({e['reason']})"
                )
            else:
                click.echo(f"  {e}")
    click.echo("store is consistent" if outcome.ok else "store has problems (exit status 1)")
