"""Errors of admin operations; each kind maps to one standard gRPC status code."""

from __future__ import annotations


class AdminError(Exception):
    """An admin request that cannot be done; the message says what to do instead."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(AdminError):
    """The request itself is wrong, whatever the broker's state."""


class NotFound(AdminError):
    """A topic, group or message the request names does not exist."""


class AlreadyExists(AdminError):
    """A topic to create exists already."""


class FailedPrecondition(AdminError):
    """The change is unsafe in the broker's current state (e.g. unconsumed messages)."""
