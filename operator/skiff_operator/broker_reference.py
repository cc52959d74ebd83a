"""The Broker a Topic or User names in ``spec.brokerRef``, and the admin access to it.

Both reconciles wait on the same two things before any broker is called: the Broker must
exist, and its admin Secret must be readable. Each wait sets the object's Ready condition
to say what the user can do, and retries later (``kopf.TemporaryError``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from .admin_access import AdminAccess, AdminSecretMissing
from .conditions import ReadySetter
from .operator_state import OperatorState


async def referenced_broker(
    state: OperatorState, namespace: str, broker_name: str, set_ready: ReadySetter
) -> dict[str, Any]:
    """The named Broker; Ready False (BrokerNotFound) and a retry while it does not exist."""
    broker = await state.api.get("Broker", namespace, broker_name)
    if broker is None:
        message = (
            f"Broker {broker_name!r} does not exist in namespace {namespace!r}; create it "
            "or fix spec.brokerRef.name"
        )
        set_ready(False, "BrokerNotFound", message)
        raise kopf.TemporaryError(message, delay=state.retry_delay)
    return broker


async def broker_access(
    state: OperatorState, broker: Mapping[str, Any], set_ready: ReadySetter
) -> AdminAccess:
    """How to call the Broker; Ready False (AdminSecretMissing) and a retry while unknown."""
    try:
        return await state.admin.access(broker)
    except AdminSecretMissing as exc:
        set_ready(False, "AdminSecretMissing", exc.message)
        raise kopf.TemporaryError(exc.message, delay=state.retry_delay) from None
