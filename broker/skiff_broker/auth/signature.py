"""Checking the request signature of RocketMQ 5's gRPC clients.

Its form is in ``wire.request_signature``.

Invariants: every function here is pure (the time is an argument); ``verify``
accepts exactly the headers ``signed_headers`` makes for a secret the lookup
returns, within ``max_skew_s`` of ``now``, and raises ``SignatureError`` with a
sentence saying what to fix otherwise. Secrets are compared in constant time.
"""

from __future__ import annotations

import datetime
import hmac
from collections.abc import Callable, Mapping

from ..wire.request_signature import (
    ALGORITHM,
    AUTHORIZATION,
    DATE_TIME,
    DATE_TIME_FORMAT,
    SESSION_TOKEN,
    sign,
    signed_headers,
)

__all__ = [
    "AUTHORIZATION",
    "DATE_TIME",
    "SESSION_TOKEN",
    "SignatureError",
    "not_matching",
    "sign",
    "signed_headers",
    "verify",
]

# RocketMQ accepts a request signed up to 15 minutes before or after its own clock.
DEFAULT_MAX_SKEW_S = 15 * 60


class SignatureError(Exception):
    """The request is not signed, or not signed right; the message says what to fix."""


def parse_authorization(value: str) -> tuple[str, str]:
    """(access key, signature) from an ``authorization`` header value."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise SignatureError(
            f"the authorization header must use {ALGORITHM}; configure the client's "
            "access key and secret key"
        )
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, equals, field = part.strip().partition("=")
        if equals:
            fields[name] = field.strip()
    access_key = fields.get("Credential", "")
    signature = fields.get("Signature", "")
    # RocketMQ 4 clients put "<access key>/<region>/..." in Credential; the key comes first.
    access_key = access_key.split("/", 1)[0]
    if not access_key or not signature:
        raise SignatureError("the authorization header needs Credential= and Signature=")
    if fields.get("SignedHeaders", DATE_TIME).lower() != DATE_TIME:
        raise SignatureError(f"only SignedHeaders={DATE_TIME} is understood")
    return access_key, signature


def parse_date_time(value: str) -> datetime.datetime:
    try:
        moment = datetime.datetime.strptime(value, DATE_TIME_FORMAT)
    except ValueError:
        raise SignatureError(
            f"{DATE_TIME} must be a UTC time like 20240501T120000Z, got {value[:32]!r}"
        ) from None
    return moment.replace(tzinfo=datetime.UTC)


def verify(
    headers: Mapping[str, str],
    secret_of: Callable[[str], str | None],
    now: datetime.datetime,
    max_skew_s: float = DEFAULT_MAX_SKEW_S,
) -> str:
    """The access key that signed ``headers``; SignatureError if they are not signed right.

    ``secret_of`` gives an access key's secret, None for an unknown key.
    """
    authorization = headers.get(AUTHORIZATION, "")
    if not authorization:
        raise SignatureError(
            "the request is not signed: authentication is enabled on this broker; "
            "configure the client with an access key and secret key"
        )
    access_key, signature = parse_authorization(authorization)
    date_time = headers.get(DATE_TIME, "")
    if not date_time:
        raise SignatureError(f"the signed request has no {DATE_TIME} header")
    skew = abs((now - parse_date_time(date_time)).total_seconds())
    if skew > max_skew_s:
        raise SignatureError(
            f"the request was signed at {date_time}, {int(skew)} s away from the broker's "
            f"clock (at most {int(max_skew_s)} s allowed); set the client's clock right "
            "(it must sign in UTC)"
        )
    secret = secret_of(access_key)
    # An unknown key and a wrong secret get the same answer: no probing for user names.
    if secret is None or not hmac.compare_digest(
        sign(secret, date_time), signature.strip().lower()
    ):
        raise SignatureError(not_matching(access_key))
    return access_key


def not_matching(access_key: str) -> str:
    """The one answer to a wrong secret, an unknown access key and a disabled user."""
    return (
        f"the signature of access key {access_key[:64]!r} does not match; check the "
        "access key and secret key the client uses"
    )
