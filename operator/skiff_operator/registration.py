"""Wires the handlers into a kopf registry with the intervals of an OperatorConfig."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import yaml

from . import GROUP, VERSION
from .admin_access import AdminCredentials
from .broker_handlers import forget_broker, reconcile_broker, refresh_broker_status
from .config import OperatorConfig
from .kube_client import KubeClient
from .operator_state import OperatorState
from .topic_handlers import delete_topic, reconcile_topic
from .user_handlers import delete_user, reconcile_user

# kopf keeps its bookkeeping in annotations under this prefix (the CRDs' status schema
# has no room for it), and its finalizer under this name.
ANNOTATION_PREFIX = "skiff.io"
FINALIZER = "skiff.io/finalizer"


NO_CREDENTIALS = (
    "no Kubernetes credentials found: run the operator in a pod with a ServiceAccount, "
    "or give it a kubeconfig (KUBECONFIG=/path/to/kubeconfig, or ~/.kube/config)"
)


def cluster_connection(settings: kopf.OperatorSettings) -> kopf.ConnectionInfo:
    """In a pod: its ServiceAccount token; elsewhere: $KUBECONFIG or ~/.kube/config.

    kopf.LoginError, with one sentence saying what to give, when neither is there or the
    kubeconfig cannot be read.
    """
    try:
        connection = kopf.login_with_service_account(
            settings=settings
        ) or kopf.login_with_kubeconfig(settings=settings)
    except kopf.LoginError:
        raise
    except (OSError, ValueError, LookupError, TypeError, AttributeError, yaml.YAMLError) as exc:
        # A malformed file fails in kopf's reading of it, somewhere: one line says which.
        reason = " ".join(str(exc).split())
        raise kopf.LoginError(
            f"cannot read the kubeconfig ({reason}); fix it, point KUBECONFIG at a valid "
            "one, or run the operator in a pod with a ServiceAccount"
        ) from None
    if connection is None:
        raise kopf.LoginError(NO_CREDENTIALS)
    return connection


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    def on_resource(decorator: Any, plural: str, **options: Any) -> Any:
        return decorator(GROUP, VERSION, plural, registry=registry, **options)

    @kopf.on.login(registry=registry)
    def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
        return cluster_connection(settings)

    @kopf.on.startup(registry=registry)
    async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix=ANNOTATION_PREFIX
        )
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=ANNOTATION_PREFIX
        )
        settings.persistence.finalizer = FINALIZER
        settings.posting.level = logging.WARNING
        # Brokers, Topics and Users are known; watching CRDs and namespaces needs no extra rights.
        settings.scanning.disabled = True
        api = await KubeClient.connect()
        memo.state = OperatorState(
            config, api, config.endpoint_resolver(), AdminCredentials(api, config.admin_timeout_s)
        )

    @kopf.on.cleanup(registry=registry)
    async def stop(memo: kopf.Memo, **_: Any) -> None:
        state: OperatorState | None = getattr(memo, "state", None)
        if state is not None:
            await state.api.close()

    for decorator in (kopf.on.create, kopf.on.update, kopf.on.resume):
        on_resource(decorator, "brokers", id="reconcile")(reconcile_broker)
        on_resource(decorator, "topics", id="reconcile")(reconcile_topic)
        on_resource(decorator, "users", id="reconcile")(reconcile_user)
    # The status refresh also takes rolling restarts their next step: one that failed (an
    # API call timed out, a broker did not answer) is tried again at the next interval,
    # not after kopf's default 60 s backoff, which would hold a restart that long.
    on_resource(
        kopf.timer,
        "brokers",
        id="status",
        interval=config.status_interval_s,
        backoff=config.status_interval_s,
    )(refresh_broker_status)
    on_resource(kopf.timer, "topics", id="resync", interval=config.topic_resync_interval_s)(
        reconcile_topic
    )
    # Also re-applies users to pods that restarted or joined, and retires rotated keys.
    on_resource(kopf.timer, "users", id="resync", interval=config.topic_resync_interval_s)(
        reconcile_user
    )
    on_resource(kopf.on.delete, "topics", id="delete")(delete_topic)
    on_resource(kopf.on.delete, "users", id="delete")(delete_user)
    # Children go by garbage collection; this only drops the operator's lock.
    on_resource(kopf.on.delete, "brokers", id="forget", optional=True)(forget_broker)
