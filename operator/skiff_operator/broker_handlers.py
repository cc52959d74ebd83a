"""Broker resources: children applied from the rendering, scale-in guarded, status kept."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.errors import SkiffError

from .broker_spec import BrokerSpec
from .conditions import READY, ready_condition, with_condition
from .kube_api import KubeApi, KubeApiError
from .naming import CLIENT_PORT, LABEL_BROKER, LABEL_GROUP, client_service_dns_name, group_suffix
from .operator_state import OperatorState
from .rendering import BrokerIdentity, render_broker

CHILD_KINDS = ("PodDisruptionBudget", "StatefulSet", "Service", "ConfigMap")


async def reconcile_broker(
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: logging.Logger,
    **_: Any,
) -> None:
    """Apply every child of the Broker; remove groups scaled away once they are drained."""
    state: OperatorState = memo.state
    async with state.lock_for("Broker", namespace, name):
        await _reconcile_broker(state, body, spec, name, namespace, patch, logger)


async def _reconcile_broker(
    state: OperatorState,
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str,
    patch: kopf.Patch,
    logger: logging.Logger,
) -> None:
    api = state.api
    generation = int(body.metadata.get("generation") or 0)
    conditions = list(body.get("status", {}).get("conditions") or [])
    broker_spec = BrokerSpec.from_manifest(spec)
    identity = BrokerIdentity(name, namespace, str(body.metadata.uid))
    groups = render_broker(broker_spec, identity, state.config.render_settings())

    try:
        for group in groups:
            for manifest in group.all():
                await api.apply(manifest)
    except KubeApiError as exc:
        _set_ready(patch, conditions, False, "ApplyFailed", exc.message, generation)
        raise kopf.TemporaryError(
            f"applying the children of Broker {name} failed: {exc}", delay=state.retry_delay
        ) from exc

    desired = {group_suffix(g.index) for g in groups}
    existing = await api.list("StatefulSet", namespace, f"{LABEL_BROKER}={name}")
    removed = sorted(
        {s["metadata"]["labels"].get(LABEL_GROUP, "") for s in existing} - desired - {""},
        key=lambda suffix: (len(suffix), suffix),
    )
    if removed:
        refusal = await _scale_in_refusal(state, namespace, name, removed)
        if refusal:
            _set_ready(patch, conditions, False, "ScaleInRefused", refusal, generation)
            raise kopf.TemporaryError(refusal, delay=state.retry_delay)
        for suffix in removed:
            await _delete_group(api, namespace, name, suffix)
            logger.info("removed broker group %s-%s", name, suffix)

    await _refresh_status(state, body, name, namespace, broker_spec, patch, conditions)


async def forget_broker(name: str, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    """Deletion cascades through owner references; only the operator's own lock goes."""
    memo.state.forget("Broker", namespace, name)


async def refresh_broker_status(
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """Periodically: ready pods per group and the Ready condition."""
    conditions = list(body.get("status", {}).get("conditions") or [])
    ready = next((c for c in conditions if c.get("type") == READY), None)
    # A refusal or failure stays until the reconcile that set it succeeds.
    if ready is not None and ready.get("reason") in ("ScaleInRefused", "ApplyFailed"):
        return
    state: OperatorState = memo.state
    async with state.lock_for("Broker", namespace, name):
        await _refresh_status(
            state, body, name, namespace, BrokerSpec.from_manifest(spec), patch, conditions
        )


async def _refresh_status(
    state: OperatorState,
    body: kopf.Body,
    name: str,
    namespace: str,
    spec: BrokerSpec,
    patch: kopf.Patch,
    conditions: list[dict[str, Any]],
) -> None:
    generation = int(body.metadata.get("generation") or 0)
    group_status = []
    not_ready = []
    rolling = []
    wanted = spec.replicas_per_group
    for index in range(spec.groups):
        suffix = group_suffix(index)
        set_name = f"{name}-{suffix}"
        stateful_set = await state.api.get("StatefulSet", namespace, set_name) or {}
        observed: Mapping[str, Any] = stateful_set.get("status") or {}
        ready = int(observed.get("readyReplicas") or 0)
        updated = int(observed.get("updatedReplicas") or 0)
        group_status.append(
            {
                "name": suffix,
                "statefulSet": set_name,
                "replicas": wanted,
                "readyReplicas": ready,
                "endpoint": _client_endpoint(state, name, index, namespace),
            }
        )
        if ready < wanted:
            not_ready.append(f"group {suffix}: {ready}/{wanted} pods ready")
        elif _rolling_out(stateful_set, updated, wanted):
            rolling.append(f"group {suffix}: {updated}/{wanted} pods updated")
    patch.status["groups"] = group_status
    patch.status["clientEndpoint"] = _client_endpoint(state, name, 0, namespace)
    patch.status["observedGeneration"] = generation
    if not_ready:
        message = "; ".join(not_ready + rolling)
        _set_ready(patch, conditions, False, "PodsNotReady", message, generation)
    elif rolling:
        _set_ready(patch, conditions, False, "RollingOut", "; ".join(rolling), generation)
    else:
        message = f"{spec.groups} group(s) of {wanted} pod(s) ready"
        _set_ready(patch, conditions, True, "Ready", message, generation)


def _rolling_out(stateful_set: Mapping[str, Any], updated: int, wanted: int) -> bool:
    """The StatefulSet controller has not yet brought every pod to the current template."""
    status = stateful_set.get("status") or {}
    generation = int((stateful_set.get("metadata") or {}).get("generation") or 0)
    if int(status.get("observedGeneration") or 0) < generation:
        return True
    update, current = status.get("updateRevision"), status.get("currentRevision")
    return updated < wanted or bool(update and current and update != current)


def _client_endpoint(state: OperatorState, name: str, index: int, namespace: str) -> str:
    host = client_service_dns_name(name, index, namespace, state.config.cluster_domain)
    return f"{host}:{CLIENT_PORT}"


def _set_ready(
    patch: kopf.Patch,
    conditions: list[dict[str, Any]],
    status: bool,
    reason: str,
    message: str,
    generation: int,
) -> None:
    condition = ready_condition(status, reason, message, generation, conditions)
    patch.status["conditions"] = with_condition(conditions, condition)


async def _scale_in_refusal(
    state: OperatorState, namespace: str, name: str, removed: list[str]
) -> str:
    """Why the groups ``removed`` cannot go yet; empty if they hold no messages."""
    problems = []
    for suffix in removed:
        index = _index_of(suffix)
        endpoint = state.resolver.master_endpoint(namespace, name, index)
        try:
            held = await asyncio.to_thread(_held_messages, endpoint, state.admin_timeout)
        except SkiffError as exc:
            problems.append(f"group {suffix} cannot be checked ({exc.message})")
            continue
        problems.extend(f"group {suffix} {line}" for line in held)
    if not problems:
        return ""
    return (
        f"scaling in Broker {name} is refused: {'; '.join(problems)}. Removing the group "
        "would lose those messages; let consumers drain them and delete the topics' "
        "messages (or the topics) on those groups, or set spec.groups back"
    )


def _held_messages(endpoint: str, timeout: float) -> list[str]:
    """One line per topic that still holds messages on the broker at ``endpoint``."""
    held = []
    with AdminClient(endpoint, timeout=timeout) as admin:
        for topic in admin.list_topics():
            count = sum(q.max_offset - q.min_offset for q in admin.queue_offsets(topic.name))
            if count > 0:
                held.append(f"holds {count} message(s) in topic {topic.name!r}")
    return held


def _index_of(suffix: str) -> int:
    index = 0
    for letter in suffix:
        index = index * 26 + (ord(letter) - ord("a") + 1)
    return index - 1


async def _delete_group(api: KubeApi, namespace: str, name: str, suffix: str) -> None:
    selector = f"{LABEL_BROKER}={name},{LABEL_GROUP}={suffix}"
    for kind in CHILD_KINDS:
        for item in await api.list(kind, namespace, selector):
            await api.delete(kind, namespace, item["metadata"]["name"])
