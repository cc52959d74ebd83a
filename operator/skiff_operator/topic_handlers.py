"""Topic resources: the topic on every group of its Broker, through the admin gRPC service."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from skiff_broker.client.admin import MessageType, Permission, Topic
from skiff_broker.client.errors import (
    AlreadyExists,
    BrokerUnavailable,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    SkiffError,
)

from .admin_access import AdminAccess
from .broker_reference import broker_access, referenced_broker
from .conditions import ready_setter
from .group_drain import DRAINING_PERMISSION
from .naming import group_suffix
from .operator_state import OperatorState, finalizer, one_at_a_time
from .topic_changes import plan_topic_change

log = logging.getLogger(__name__)

_PERMISSIONS = {
    "READ_WRITE": Permission.READ_WRITE,
    "READ": Permission.READ,
    "WRITE": Permission.WRITE,
}


@dataclasses.dataclass(frozen=True, slots=True)
class GroupOutcome:
    group: str
    topic: Topic | None  # as the broker holds it after this reconcile (None: unknown)
    error: SkiffError | None = None


def desired_topic(name: str, spec: Mapping[str, Any]) -> Topic:
    return Topic(
        name=spec.get("topicName") or name,
        read_queues=int(spec.get("readQueues", 8)),
        write_queues=int(spec.get("writeQueues", 8)),
        perm=_PERMISSIONS[spec.get("permission") or "READ_WRITE"],
        message_type=MessageType(spec.get("messageType") or "NORMAL"),
    )


def on_group(desired: Topic, index: int, draining: set[str]) -> Topic:
    """The topic as group ``index`` must hold it: never writable on a draining group."""
    if group_suffix(index) in draining:
        return dataclasses.replace(desired, perm=DRAINING_PERMISSION)
    return desired


def sync_topic_on_group(endpoint: str, desired: Topic, access: AdminAccess) -> Topic:
    """Bring the topic on one broker to ``desired`` in the safe order; the state reached.

    Raises FailedPrecondition (with the broker's reason) where a step must wait, e.g.
    for consumers to drain the queues a shrink removes.
    """
    with access.client(endpoint) as admin:
        try:
            current: Topic | None = admin.get_topic(desired.name)
        except NotFound:
            current = None
        for step in plan_topic_change(current, desired):
            try:
                current = admin.apply_topic(step)
            except AlreadyExists:
                # Created by someone else since the look-up: change it from what it is.
                return sync_topic_on_group(endpoint, desired, access)
        return current or desired


async def _reconcile_topic(
    state: OperatorState,
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str,
    patch: kopf.Patch,
    logger: logging.Logger,
) -> None:
    desired = desired_topic(name, spec)
    broker_name = spec["brokerRef"]["name"]
    set_ready = ready_setter(body, patch.status, topicName=desired.name)
    broker = await referenced_broker(state, namespace, broker_name, set_ready)
    access = await broker_access(state, broker, set_ready)
    broker_spec = broker.get("spec") or {}
    groups = int(broker_spec.get("groups", 1))
    draining = set(broker_spec.get("drainGroups") or ())
    outcomes = await asyncio.gather(
        *(
            _sync_group(
                state, namespace, broker_name, index, on_group(desired, index, draining), access
            )
            for index in range(groups)
        )
    )
    held = [o.topic for o in outcomes if o.topic is not None]
    if held:
        # What every group can serve: the fewest read queues, the most write queues.
        patch.status["readQueues"] = min(t.read_queues for t in held)
        patch.status["writeQueues"] = max(t.write_queues for t in held)
    patch.status["groups"] = [o.group for o in outcomes if o.error is None]

    failed = [o for o in outcomes if o.error is not None]
    if not failed:
        set_ready(True, "Reconciled", f"topic {desired.name!r} is on {groups} broker group(s)")
        return
    message = "; ".join(f"group {o.group}: {o.error.message}" for o in failed if o.error)
    errors = [o.error for o in failed]
    if any(isinstance(e, InvalidArgument) for e in errors):
        set_ready(False, "Invalid", message)
        raise kopf.PermanentError(message)
    if all(isinstance(e, FailedPrecondition) for e in errors):
        set_ready(False, "Draining", message)
    elif any(isinstance(e, BrokerUnavailable) for e in errors):
        set_ready(False, "BrokerUnavailable", message)
    else:
        set_ready(False, "BrokerError", message)
    logger.warning("topic %s not reconciled yet: %s", desired.name, message)
    raise kopf.TemporaryError(message, delay=state.retry_delay)


reconcile_topic = one_at_a_time("Topic", _reconcile_topic)


async def _sync_group(
    state: OperatorState,
    namespace: str,
    broker: str,
    index: int,
    desired: Topic,
    access: AdminAccess,
) -> GroupOutcome:
    suffix = group_suffix(index)
    endpoint = state.resolver.master_endpoint(namespace, broker, index)
    try:
        topic = await asyncio.to_thread(sync_topic_on_group, endpoint, desired, access)
    except BrokerUnavailable:
        # The client's own advice (check --endpoint) means nothing to a Topic's reader.
        unreachable = BrokerUnavailable(
            f"the master of group {suffix} at {endpoint} does not answer; it may still be "
            "starting (see the Broker's status)"
        )
        return GroupOutcome(suffix, None, unreachable)
    except SkiffError as exc:
        state.admin.note_failure(namespace, broker, exc)
        reached = await asyncio.to_thread(_topic_on_group, endpoint, desired.name, access)
        return GroupOutcome(suffix, reached, exc)
    return GroupOutcome(suffix, topic)


def _topic_on_group(endpoint: str, name: str, access: AdminAccess) -> Topic | None:
    """The topic as a broker holds it now; None if it has none or cannot say."""
    try:
        with access.client(endpoint) as admin:
            return admin.get_topic(name)
    except SkiffError:
        return None


async def _delete_topic(
    state: OperatorState,
    spec: kopf.Spec,
    name: str,
    namespace: str,
    logger: logging.Logger,
) -> None:
    """Finalizer: remove the topic from the brokers unless ``deletionPolicy: Retain``."""
    topic_name = spec.get("topicName") or name
    if spec.get("deletionPolicy") == "Retain":
        logger.info("keeping topic %s on the brokers (deletionPolicy Retain)", topic_name)
        return
    broker_name = spec["brokerRef"]["name"]
    broker = await state.api.get("Broker", namespace, broker_name)
    if broker is None or broker["metadata"].get("deletionTimestamp"):
        # Nothing left to delete the topic from; do not hold the Topic forever.
        logger.info("Broker %s is gone; releasing topic %s", broker_name, topic_name)
        return
    groups = int((broker.get("spec") or {}).get("groups", 1))
    for index in range(groups):
        endpoint = state.resolver.master_endpoint(namespace, broker_name, index)
        try:
            access = await state.admin.access(broker)
            await asyncio.to_thread(_delete_on_group, endpoint, topic_name, access)
        except SkiffError as exc:
            state.admin.note_failure(namespace, broker_name, exc)
            raise kopf.TemporaryError(
                f"deleting topic {topic_name!r} on group {group_suffix(index)} failed: "
                f"{exc.message}",
                delay=state.retry_delay,
            ) from exc


delete_topic = finalizer("Topic", _delete_topic)


def _delete_on_group(endpoint: str, topic: str, access: AdminAccess) -> None:
    # NotFound: nothing left to delete. InvalidArgument: the broker refuses the name
    # (one of its own topics), so the operator never created it either.
    with access.client(endpoint) as admin:
        try:
            admin.delete_topic(topic)
        except (NotFound, InvalidArgument) as exc:
            log.info("topic %s not deleted on %s: %s", topic, endpoint, exc.message)
