"""The request signature of RocketMQ 5's gRPC clients: its headers, and how to make them.

A signed request carries ``x-mq-date-time`` (UTC, ``yyyyMMdd'T'HHmmss'Z'``) and
``authorization: MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
Signature=<hex HMAC-SHA1 of the date-time under the secret key>``, plus
``x-mq-session-token`` when the client has one. Brokers check it in
``skiff_broker.auth.signature``; clients make it here. Every function is pure.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac

ALGORITHM = "MQv2-HMAC-SHA1"
AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
SESSION_TOKEN = "x-mq-session-token"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"


def sign(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def format_date_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime(DATE_TIME_FORMAT)


def signed_headers(
    access_key: str, secret_key: str, now: datetime.datetime, session_token: str = ""
) -> list[tuple[str, str]]:
    """The metadata that signs one request made at ``now``."""
    date_time = format_date_time(now)
    headers = [
        (DATE_TIME, date_time),
        (
            AUTHORIZATION,
            f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME}, "
            f"Signature={sign(secret_key, date_time)}",
        ),
    ]
    if session_token:
        headers.append((SESSION_TOKEN, session_token))
    return headers
