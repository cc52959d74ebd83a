"""User resources: a user and its ACL on every pod of its Broker, keys in a Secret.

Level-based: each reconcile reads the Secret and the Broker and makes every pod hold the
Secret's key pair(s); the admin calls are idempotent, so repeating one changes nothing.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

import kopf

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.errors import InvalidArgument, SkiffError

from .conditions import ready_condition, with_condition
from .operator_state import OperatorState
from .user_model import (
    ROTATE_ANNOTATION,
    KeyPair,
    Keys,
    UserSpec,
    credentials_secret,
    credentials_secret_name,
    format_time,
    keys_patch,
    new_key_pair,
    pod_names,
    retiring,
    rotated,
    rotation_pending,
    without_previous,
)

log = logging.getLogger(__name__)


class PodFailure(Exception):
    def __init__(self, pod: str, endpoint: str, error: SkiffError) -> None:
        super().__init__(f"pod {pod} ({endpoint}): {error.message}")
        self.error = error


async def reconcile_user(
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: logging.Logger,
    **_: Any,
) -> None:
    state: OperatorState = memo.state
    async with state.lock_for("User", namespace, name):
        await _reconcile_user(state, body, spec, name, namespace, patch, logger)


async def _reconcile_user(
    state: OperatorState,
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str,
    patch: kopf.Patch,
    logger: logging.Logger,
) -> None:
    generation = int(body.metadata.get("generation") or 0)
    conditions = list(body.get("status", {}).get("conditions") or [])
    secret_name = credentials_secret_name(name)

    def set_ready(status: bool, reason: str, message: str) -> None:
        condition = ready_condition(status, reason, message, generation, conditions)
        patch.status["conditions"] = with_condition(conditions, condition)
        patch.status["observedGeneration"] = generation
        patch.status["secretName"] = secret_name

    try:
        desired = UserSpec.from_manifest(spec)
    except ValueError as exc:
        set_ready(False, "Invalid", f"{exc}; fix the User's spec")
        raise kopf.PermanentError(str(exc)) from None

    broker = await state.api.get("Broker", namespace, desired.broker)
    if broker is None:
        message = (
            f"Broker {desired.broker!r} does not exist in namespace {namespace!r}; create it "
            "or fix spec.brokerRef.name"
        )
        set_ready(False, "BrokerNotFound", message)
        raise kopf.TemporaryError(message, delay=state.retry_delay)

    keys = await _stored_keys(state, name, namespace, str(body.metadata.get("uid")))
    now = datetime.datetime.now(datetime.UTC)
    token = (body.metadata.get("annotations") or {}).get(ROTATE_ANNOTATION, "")
    wanted = rotated(keys, token, name, desired.grace_seconds, now)
    if wanted != keys:
        # The Secret first: a new pair is never on a broker without being recorded.
        await state.api.merge_patch("Secret", namespace, secret_name, keys_patch(wanted))
        logger.info("user %s rotated to access key %s", name, wanted.current.access_key)
        keys = wanted
    patch.status["accessKey"] = keys.current.access_key
    patch.status["previousAccessKey"] = keys.previous.access_key if keys.previous else None
    patch.status["previousKeyExpiresAt"] = (
        format_time(keys.previous_expires_at) if keys.previous_expires_at else None
    )

    broker_spec = broker.get("spec") or {}
    pods = pod_names(
        desired.broker,
        int(broker_spec.get("groups", 1)),
        int(broker_spec.get("replicasPerGroup", 1)),
    )
    leaving = retiring(keys, token, now)
    kept = [pair for pair in keys.pairs() if pair != leaving]
    results = await asyncio.gather(
        *(_sync_pod(state, namespace, desired, index, pod, kept, leaving) for index, pod in pods),
        return_exceptions=True,
    )
    failures = [r for r in results if isinstance(r, PodFailure)]
    others = [r for r in results if isinstance(r, BaseException) and not isinstance(r, PodFailure)]
    if others:
        raise others[0]
    if not failures and leaving is not None:
        # Off every pod: only now may the Secret forget it.
        keys = without_previous(keys)
        await state.api.merge_patch("Secret", namespace, secret_name, keys_patch(keys))
        patch.status["previousAccessKey"] = None
        patch.status["previousKeyExpiresAt"] = None
        logger.info("user %s: previous access key %s retired", name, leaving.access_key)
        if rotation_pending(keys, token):
            # The rotation asked for during a grace period can go ahead now.
            await _reconcile_user(state, body, spec, name, namespace, patch, logger)
            return

    if failures:
        message = "; ".join(str(f) for f in failures)
        if any(isinstance(f.error, InvalidArgument) for f in failures):
            set_ready(False, "Invalid", f"{message}; fix spec.acl")
            raise kopf.PermanentError(message)
        set_ready(
            False,
            "BrokerUnavailable",
            f"{message}; the user is applied when the pod answers (see the Broker's status)",
        )
        raise kopf.TemporaryError(message, delay=state.retry_delay)
    grace = ""
    if keys.previous is not None and keys.previous_expires_at is not None:
        grace = (
            f"; previous access key {keys.previous.access_key} stays valid until "
            f"{format_time(keys.previous_expires_at)}"
        )
    auth = ((broker_spec.get("settings") or {}).get("SKIFF_AUTH") or "disabled").lower()
    if auth != "enabled":
        set_ready(
            True,
            "AuthDisabled",
            f"user {keys.current.access_key} is on {len(pods)} broker pod(s), but Broker "
            f"{desired.broker!r} does not enforce authentication, so its ACL has no effect "
            f"until it does{grace}",
        )
        return
    set_ready(
        True, "Reconciled", f"user {keys.current.access_key} is on {len(pods)} broker pod(s){grace}"
    )


async def _stored_keys(state: OperatorState, name: str, namespace: str, uid: str) -> Keys:
    """The Secret's keys, creating the Secret with a fresh pair the first time."""
    secret = await state.api.get("Secret", namespace, credentials_secret_name(name))
    if secret is None:
        fresh = Keys(current=new_key_pair(name))
        if await state.api.create_once(credentials_secret(name, namespace, uid, fresh)):
            return fresh
        secret = await state.api.get("Secret", namespace, credentials_secret_name(name))
        if secret is None:
            raise kopf.TemporaryError("the credentials Secret vanished while being created")
    try:
        return Keys.from_secret(secret)
    except (KeyError, ValueError) as exc:
        raise kopf.PermanentError(
            f"Secret {credentials_secret_name(name)} lacks {exc}; delete it and the operator "
            "creates it again with new keys"
        ) from None


async def _sync_pod(
    state: OperatorState,
    namespace: str,
    desired: UserSpec,
    index: int,
    pod: str,
    pairs: list[KeyPair],
    retiring: KeyPair | None,
) -> None:
    endpoint = state.resolver.pod_endpoint(namespace, desired.broker, index, pod)
    try:
        await asyncio.to_thread(_apply_on, endpoint, desired, pairs, retiring, state.admin_timeout)
    except SkiffError as exc:
        raise PodFailure(pod, endpoint, exc) from None


def _apply_on(
    endpoint: str,
    desired: UserSpec,
    pairs: list[KeyPair],
    retiring: KeyPair | None,
    timeout: float,
) -> None:
    with AdminClient(endpoint, timeout=timeout) as admin:
        for pair in pairs:
            admin.apply_user(
                pair.access_key,
                pair.secret_key,
                super_user=desired.super_user,
                enabled=desired.enabled,
            )
            admin.apply_acl(pair.access_key, desired.acl)
        if retiring is not None:
            admin.delete_user(retiring.access_key)


async def delete_user(
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str,
    memo: kopf.Memo,
    logger: logging.Logger,
    **_: Any,
) -> None:
    """Finalizer: the user leaves every broker pod, then its Secret goes."""
    state: OperatorState = memo.state
    async with state.lock_for("User", namespace, name):
        await _delete_user(state, spec, name, namespace, logger)
    state.forget("User", namespace, name)


async def _delete_user(
    state: OperatorState, spec: kopf.Spec, name: str, namespace: str, logger: logging.Logger
) -> None:
    broker_name = spec["brokerRef"]["name"]
    secret = await state.api.get("Secret", namespace, credentials_secret_name(name))
    broker = await state.api.get("Broker", namespace, broker_name)
    if (
        secret is not None
        and broker is not None
        and not broker["metadata"].get("deletionTimestamp")
    ):
        try:
            access_keys = [pair.access_key for pair in Keys.from_secret(secret).pairs()]
        except (KeyError, ValueError):
            access_keys = []
        broker_spec = broker.get("spec") or {}
        pods = pod_names(
            broker_name,
            int(broker_spec.get("groups", 1)),
            int(broker_spec.get("replicasPerGroup", 1)),
        )
        for index, pod in pods:
            endpoint = state.resolver.pod_endpoint(namespace, broker_name, index, pod)
            try:
                await asyncio.to_thread(_delete_on, endpoint, access_keys, state.admin_timeout)
            except SkiffError as exc:
                raise kopf.TemporaryError(
                    f"removing user {name!r} from pod {pod} ({endpoint}) failed: "
                    f"{exc.message}; it is retried",
                    delay=state.retry_delay,
                ) from exc
    else:
        logger.info("Broker %s or the keys are gone; releasing user %s", broker_name, name)
    # The owner reference would do it too; deleting now leaves no usable keys behind.
    await state.api.delete("Secret", namespace, credentials_secret_name(name))


def _delete_on(endpoint: str, access_keys: list[str], timeout: float) -> None:
    with AdminClient(endpoint, timeout=timeout) as admin:
        for access_key in access_keys:
            # False (nothing deleted) where the pod never got it: fine.
            admin.delete_user(access_key)
