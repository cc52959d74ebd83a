"""Options every client command shares, and how broker errors end a command.

Exit codes: 0 success, 1 an error the broker reported (or could not be
reached; the message goes to stderr), 2 a usage error (click's own).
"""

from __future__ import annotations

import datetime
import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import click

from ..client.channels import ClientTls, using
from ..client.credentials import Credentials
from ..client.environment import (
    ACCESS_KEY_ENV,
    ENDPOINT_ENV,
    SECRET_KEY_ENV,
    TLS_CA_ENV,
    TLS_ENV,
    TLS_INSECURE_ENV,
)
from ..client.errors import SkiffError

DEFAULT_ENDPOINT = "127.0.0.1:8081"


def _check_endpoint(ctx: click.Context, param: click.Parameter, value: str) -> str:
    # A URL's scheme is dropped, not obeyed: --tls chooses the transport.
    for scheme in ("http://", "https://", "grpc://", "grpcs://"):
        if value.lower().startswith(scheme):
            value = value[len(scheme) :].rstrip("/")
            break
    if "/" in value:
        raise click.BadParameter(f"expected HOST:PORT without a path, e.g. {DEFAULT_ENDPOINT}")
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"expected HOST:PORT, e.g. {DEFAULT_ENDPOINT}; got {value!r}")
    return value


def client_command(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add --endpoint, the TLS options, the keys and --json; turn a client error into exit
    code 1 with its message.

    The command gets ``credentials`` (None without keys) instead of the two keys.
    """

    @click.option(
        "--endpoint",
        envvar=ENDPOINT_ENV,
        default=DEFAULT_ENDPOINT,
        show_default=True,
        callback=_check_endpoint,
        help=f"The broker's gRPC address, HOST:PORT (env {ENDPOINT_ENV}).",
    )
    @click.option(
        "--tls/--no-tls",
        envvar=TLS_ENV,
        default=False,
        help=f"Connect with TLS (env {TLS_ENV}); a permissive broker takes either.",
    )
    @click.option(
        "--tls-ca",
        envvar=TLS_CA_ENV,
        default="",
        type=click.Path(dir_okay=False),
        help="PEM CA file to verify the broker's certificate with, e.g. its self-signed "
        f"<data-dir>/tls/self-signed.crt (env {TLS_CA_ENV}; implies --tls).",
    )
    @click.option(
        "--tls-insecure",
        envvar=TLS_INSECURE_ENV,
        is_flag=True,
        default=False,
        help=f"TLS without verifying the broker's certificate (env {TLS_INSECURE_ENV}; "
        "implies --tls).",
    )
    @click.option(
        "--access-key",
        envvar=ACCESS_KEY_ENV,
        default="",
        help="Sign requests as this user, for brokers with authentication on "
        f"(env {ACCESS_KEY_ENV}).",
    )
    @click.option(
        "--secret-key",
        envvar=SECRET_KEY_ENV,
        default="",
        help=f"The user's secret key (env {SECRET_KEY_ENV}, which keeps it out of `ps`).",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
    @functools.wraps(command)
    def run(
        *args: Any,
        tls: bool,
        tls_ca: str,
        tls_insecure: bool,
        access_key: str,
        secret_key: str,
        **kwargs: Any,
    ) -> Any:
        try:
            kwargs["credentials"] = Credentials.of(access_key, secret_key)
        except ValueError as exc:
            raise click.UsageError(f"{exc} (--access-key and --secret-key)") from None
        settings = ClientTls(
            enabled=tls or bool(tls_ca) or tls_insecure, ca_file=tls_ca, verify=not tls_insecure
        )
        try:
            with using(settings):
                return command(*args, **kwargs)
        except OSError as exc:
            raise click.ClickException(str(exc)) from None
        except SkiffError as exc:
            if kwargs.get("as_json"):
                click.echo(json.dumps({"error": exc.code, "message": exc.message}), err=True)
                sys.exit(1)
            raise click.ClickException(exc.message) from None

    return run


class Timestamp(click.ParamType):
    """Milliseconds since the epoch, or an ISO 8601 time (local time unless it has a zone)."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if text.isdigit():
            return int(text)
        try:
            moment = datetime.datetime.fromisoformat(text)
        except ValueError:
            self.fail(
                f"{value!r} is neither milliseconds since the epoch nor an ISO time "
                "like 2024-05-01T12:00:00Z",
                param,
                ctx,
            )
        return int(moment.timestamp() * 1000)
