"""Who signed the call being served, for the services behind the gate.

The gate sets it once a call's signature is verified, in the call's own task, before the
service runs; the service reads it to tell whose session a client id names.

Invariants: ``signed_by`` is None where no gate runs (authentication off), and otherwise
the access key the gate verified for this very call: every call runs in a context of its
own (and the tasks it starts copy it), so one call never sees another's caller.
"""

from __future__ import annotations

import contextvars

_SIGNED_BY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "skiff_signed_by", default=None
)


def verified(access_key: str) -> None:
    """Record that ``access_key`` signed the current call (the gate, after verifying)."""
    _SIGNED_BY.set(access_key)


def signed_by() -> str | None:
    """The access key that signed the current call; None with authentication off."""
    return _SIGNED_BY.get()
