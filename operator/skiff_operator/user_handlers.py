"""User resources: a user and its ACL on the master of every group, keys in a Secret.

Replicas take users and ACLs from their master in the replication stream (and refuse
user writes as they refuse topic writes), so the operator writes to masters only: the
pod holding the group's Lease. Level-based: each reconcile reads the Secret, the
Broker and the Leases and makes every master hold the Secret's key pair(s); the admin
calls are idempotent, so repeating one changes nothing. A group without a master is
retried, and a new master is written to at the next resync.
"""

from __future__ import annotations

import asyncio
import datetime
import logging

import kopf

from skiff_broker.client.errors import BrokerUnavailable, InvalidArgument, SkiffError

from .admin_access import AdminAccess
from .broker_reference import broker_access, referenced_broker
from .broker_spec import BrokerSpec
from .cluster_status import read_lease
from .conditions import ready_setter
from .naming import group_suffix, lease_name
from .operator_state import OperatorState, finalizer, one_at_a_time
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
    retiring,
    rotated,
    rotation_pending,
    without_previous,
)

log = logging.getLogger(__name__)


class GroupFailure(Exception):
    def __init__(self, group: str, where: str, error: SkiffError) -> None:
        super().__init__(f"group {group}{where}: {error.message}")
        self.group = group
        self.error = error


async def group_masters(
    state: OperatorState, namespace: str, broker: str, groups: int
) -> list[tuple[int, str]]:
    """(group index, the pod holding the group's Lease, "" while none does) per group."""
    now = datetime.datetime.now(datetime.UTC)
    masters = []
    for index in range(groups):
        lease = await state.api.get("Lease", namespace, lease_name(broker, index))
        masters.append((index, read_lease(lease, now).master))
    return masters


async def _reconcile_user(
    state: OperatorState,
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str,
    patch: kopf.Patch,
    logger: logging.Logger,
) -> None:
    secret_name = credentials_secret_name(name)
    set_ready = ready_setter(body, patch.status, secretName=secret_name)

    try:
        desired = UserSpec.from_manifest(spec)
    except ValueError as exc:
        set_ready(False, "Invalid", f"{exc}; fix the User's spec")
        raise kopf.PermanentError(str(exc)) from None

    broker = await referenced_broker(state, namespace, desired.broker, set_ready)

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

    broker_spec = BrokerSpec.from_manifest(broker.get("spec") or {})
    if not broker_spec.auth.enabled:
        # Brokers refuse user management while authentication is off (anyone could plant a
        # super user then); the resync applies the user once the Broker enforces it.
        set_ready(
            False,
            "AuthDisabled",
            f"Broker {desired.broker!r} does not enforce authentication (spec.auth.enabled "
            "is false), and brokers take no users while it is off; the user is applied once "
            "spec.auth.enabled is true",
        )
        return
    access = await broker_access(state, broker, set_ready)
    groups = broker_spec.groups
    masters = await group_masters(state, namespace, desired.broker, groups)
    leaving = retiring(keys, token, now)
    kept = [pair for pair in keys.pairs() if pair != leaving]
    results = await asyncio.gather(
        *(
            _sync_master(state, namespace, desired, index, pod, kept, leaving, access)
            for index, pod in masters
        ),
        return_exceptions=True,
    )
    failures = [r for r in results if isinstance(r, GroupFailure)]
    others = [
        r for r in results if isinstance(r, BaseException) and not isinstance(r, GroupFailure)
    ]
    if others:
        raise others[0]
    patch.status["groups"] = sorted(
        {group_suffix(index) for index, _ in masters} - {f.group for f in failures}
    )
    if not failures and leaving is not None:
        # Off every master (and so, through replication, every replica): only now may
        # the Secret forget it.
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
            f"user {keys.current.access_key} is on {groups - len(failures)}/{groups} "
            f"group(s); {message}; the user is applied when the master answers (see the "
            "Broker's status)",
        )
        raise kopf.TemporaryError(message, delay=state.retry_delay)
    grace = ""
    if keys.previous is not None and keys.previous_expires_at is not None:
        grace = (
            f"; previous access key {keys.previous.access_key} stays valid until "
            f"{format_time(keys.previous_expires_at)}"
        )
    placed = f"user {keys.current.access_key} is on {groups}/{groups} group(s)"
    set_ready(True, "Reconciled", f"{placed}{grace}")


reconcile_user = one_at_a_time("User", _reconcile_user)


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
    owners = (secret.get("metadata") or {}).get("ownerReferences") or []
    users = {o.get("uid") for o in owners if o.get("kind") == "User"}
    if users and uid not in users:
        # A deleted User's Secret waiting for garbage collection: its keys are not this
        # User's to take over.
        raise kopf.TemporaryError(
            f"Secret {credentials_secret_name(name)} belongs to an earlier User {name!r} and "
            "is being garbage-collected; its keys are not reused, fresh ones follow"
        )
    try:
        return Keys.from_secret(secret)
    except (KeyError, ValueError) as exc:
        raise kopf.PermanentError(
            f"Secret {credentials_secret_name(name)} lacks {exc}; delete it and the operator "
            "creates it again with new keys"
        ) from None


def _no_master(broker: str, index: int) -> GroupFailure:
    return GroupFailure(
        group_suffix(index),
        "",
        BrokerUnavailable(
            f"no broker holds the Lease {lease_name(broker, index)}, so the group has no "
            "master to take the user"
        ),
    )


async def _sync_master(
    state: OperatorState,
    namespace: str,
    desired: UserSpec,
    index: int,
    master: str,
    pairs: list[KeyPair],
    retiring: KeyPair | None,
    access: AdminAccess,
) -> None:
    if not master:
        raise _no_master(desired.broker, index)
    endpoint = state.resolver.pod_endpoint(namespace, desired.broker, index, master)
    try:
        await asyncio.to_thread(_apply_on, endpoint, desired, pairs, retiring, access)
    except SkiffError as exc:
        state.admin.note_failure(namespace, desired.broker, exc)
        raise GroupFailure(group_suffix(index), f" (master {master} at {endpoint})", exc) from None


def _apply_on(
    endpoint: str,
    desired: UserSpec,
    pairs: list[KeyPair],
    retiring: KeyPair | None,
    access: AdminAccess,
) -> None:
    with access.client(endpoint) as admin:
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


async def _delete_user(
    state: OperatorState, spec: kopf.Spec, name: str, namespace: str, logger: logging.Logger
) -> None:
    """Finalizer: the user leaves every group's master; its Secret goes with the User."""
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
        groups = BrokerSpec.from_manifest(broker.get("spec") or {}).groups
        try:
            access = await state.admin.access(broker)
            for index, master in await group_masters(state, namespace, broker_name, groups):
                if not master:
                    raise _no_master(broker_name, index).error
                endpoint = state.resolver.pod_endpoint(namespace, broker_name, index, master)
                await asyncio.to_thread(_delete_on, endpoint, access_keys, access)
        except SkiffError as exc:
            state.admin.note_failure(namespace, broker_name, exc)
            raise kopf.TemporaryError(
                f"removing user {name!r} from Broker {broker_name!r} failed: {exc.message}; "
                "it is retried",
                delay=state.retry_delay,
            ) from exc
    else:
        logger.info("Broker %s or the keys are gone; releasing user %s", broker_name, name)
    # The keys are off every broker now; the Secret, owned by the User, goes with it by
    # garbage collection, so the operator needs no right to delete Secrets.


delete_user = finalizer("User", _delete_user)


def _delete_on(endpoint: str, access_keys: list[str], access: AdminAccess) -> None:
    with access.client(endpoint) as admin:
        for access_key in access_keys:
            # False (nothing deleted) where the master never got it: fine.
            admin.delete_user(access_key)
