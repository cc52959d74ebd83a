"""How much request data the client port holds for calls whose requests have not arrived
in full, and how long a request message may take to arrive: the settings.

A gRPC request message is held whole until its handler takes it; these bound what all of
that costs. Past a budget clients are held back by HTTP/2 flow control (they wait, nothing
fails); a message that does not arrive within the timeout ends its call with
DEADLINE_EXCEEDED and its buffer is freed.

Invariant: the budgets in effect always hold one request message of the largest size the
port accepts (``in_effect``), so no setting can leave such a message unable to arrive.
"""

from __future__ import annotations

import dataclasses

from ...wire.setting import option

MiB = 1 << 20
# A gRPC message's length prefix (a flag octet and a 4-octet length).
_PREFIX = 5


@dataclasses.dataclass(slots=True)
class RequestBufferConfig:
    per_connection: int = option(
        32 * MiB,
        "--request-buffer-per-connection",
        "SKIFF_REQUEST_BUFFER_PER_CONNECTION",
        "Request data one client connection may have the broker hold before its calls' "
        "handlers take it (past it the client waits on HTTP/2 flow control). Raised, if "
        "lower, to hold one request of the largest size accepted (4 x --max-message-size, "
        "at least 16m).",
        kind="size",
        minimum=1,
    )
    total: int = option(
        128 * MiB,
        "--request-buffer-total",
        "SKIFF_REQUEST_BUFFER_TOTAL",
        "Request data all client connections together may have the broker hold before "
        "handlers take it; past it new request data waits on flow control. At least "
        "--request-buffer-per-connection.",
        kind="size",
        minimum=1,
    )
    message_timeout_s: float = option(
        30.0,
        "--request-message-timeout",
        "SKIFF_REQUEST_MESSAGE_TIMEOUT",
        "Seconds a request message may take to arrive in full from its first octet (a "
        "unary call's whole request); a slower one ends its call with DEADLINE_EXCEEDED "
        "and its buffer is freed.",
        minimum=0,
        min_open=True,
    )

    def validate(self) -> None:
        if self.per_connection <= 0 or self.total <= 0:
            raise ValueError(
                "--request-buffer-per-connection and --request-buffer-total must be positive"
            )
        if self.message_timeout_s <= 0:
            raise ValueError("--request-message-timeout must be a positive number of seconds")

    def in_effect(self, max_request_message: int) -> tuple[int, int]:
        """(per connection, total) as applied, for requests of up to ``max_request_message``."""
        per_connection = max(self.per_connection, max_request_message + _PREFIX)
        return per_connection, max(self.total, per_connection)
