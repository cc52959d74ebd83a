"""Broker resources: children applied from the rendering, scale-in guarded, status kept.

Level-based: every reconcile and every status refresh reads the current objects (the
groups' StatefulSets, pods and Leases, the external Services) and acts on what they
say now. A failover needs none of this: the brokers move the Lease and the role label
themselves; the operator only reports it, restarts pods for a new template (replicas
first), drains groups and keeps the external endpoints map.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from skiff_broker.client.errors import SkiffError

from .admin_access import AdminAccess
from .broker_certificates import TlsState, ensure_certificate
from .broker_spec import BrokerSpec
from .cluster_status import GroupLease, external_endpoint, read_lease
from .conditions import READY, conditions_of, generation_of, write_ready
from .group_drain import DrainProgress, drain_group
from .kube_client import KubeApiError, KubeClient
from .naming import (
    CLIENT_PORT,
    LABEL_BROKER,
    LABEL_GROUP,
    REMOTING_PORT,
    REMOTING_PORT_NAME,
    bootstrap_service_dns_name,
    client_service_dns_name,
    endpoints_config_map_name,
    external_remoting_key,
    external_service_name,
    group_index,
    group_name,
    group_suffix,
    lease_name,
    network_policy_name,
    pod_monitor_name,
)
from .operator_state import OperatorState, one_at_a_time
from .rendering import (
    BrokerIdentity,
    broker_labels,
    owner_reference,
    render_admin_secret,
    render_broker,
    render_cluster,
    render_ha_secret,
    render_pod_monitor,
)
from .rolling_restart import next_restart

CHILD_KINDS = ("PodDisruptionBudget", "StatefulSet", "Service", "ConfigMap", "NetworkPolicy")

log = logging.getLogger(__name__)


async def _reconcile_broker(
    state: OperatorState,
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str,
    patch: kopf.Patch,
    logger: logging.Logger,
) -> None:
    """Apply every child of the Broker; remove groups scaled away once they are drained."""
    api = state.api
    generation = generation_of(body)
    conditions = conditions_of(body)
    broker_spec = BrokerSpec.from_manifest(spec)
    identity = BrokerIdentity(name, namespace, str(body.metadata.uid))

    cluster = render_cluster(identity, broker_spec)
    clash = await _name_clash(api, cluster.bootstrap_service, identity)
    if clash:
        _set_ready(patch, conditions, False, "ApplyFailed", clash, generation)
        raise kopf.TemporaryError(clash, delay=state.retry_delay)
    try:
        # Before the pods that read it; made once, never overwritten (pods hold it).
        if await api.create_once(render_ha_secret(identity)):
            logger.info("created the replication secret of Broker %s", name)
        # Kept when auth is turned off: turning it on again keeps the pods' super user.
        if broker_spec.auth.enabled and await api.create_once(render_admin_secret(identity)):
            logger.info("created the admin Secret (super user) of Broker %s", name)
        # Before the pods that mount it; whether a user's Secret has a CA shapes the pods.
        tls = await _ensure_certificate(state, identity, broker_spec)
        groups = render_broker(
            broker_spec, identity, state.config.render_settings(), tls.user_secret_has_ca
        )
        for manifest in cluster.all():
            await api.apply(manifest)
        for group in groups:
            for manifest in group.all():
                await api.apply(manifest)
            if group.network_policy is None:
                # Turned off: a policy applied earlier would keep fencing the pods.
                await api.delete("NetworkPolicy", namespace, network_policy_name(name, group.index))
        patch.status["podMonitor"] = await _apply_pod_monitor(
            api, broker_spec, identity, bool(state.config.render_settings().scrapers(broker_spec))
        )
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
        refusal = await _scale_in_refusal(state, body, removed, broker_spec)
        if refusal:
            _set_ready(patch, conditions, False, "ScaleInRefused", refusal, generation)
            raise kopf.TemporaryError(refusal, delay=state.retry_delay)
        for suffix in removed:
            await _delete_group(api, namespace, name, suffix)
            logger.info("removed broker group %s-%s", name, suffix)

    await _refresh_status(state, body, name, namespace, broker_spec, patch, conditions, tls)


reconcile_broker = one_at_a_time("Broker", _reconcile_broker)


async def _ensure_certificate(
    state: OperatorState, identity: BrokerIdentity, spec: BrokerSpec
) -> TlsState:
    now = datetime.datetime.now(datetime.UTC)
    return await ensure_certificate(state.api, identity, spec, state.config.cluster_domain, now)


async def _apply_pod_monitor(
    api: KubeClient, spec: BrokerSpec, broker: BrokerIdentity, scraped: bool
) -> str:
    """Make (or remove) the Broker's PodMonitor; what became of it, for status.podMonitor.

    The kind exists only where the Prometheus Operator's CRDs are installed; without
    them the Broker is served all the same and the status says why there is none.
    """
    if not spec.metrics.pod_monitor:
        try:
            await api.delete("PodMonitor", broker.namespace, pod_monitor_name(broker.name))
        except KubeApiError as exc:
            # 404 of an absent kind is taken by delete; anything else is worth a word.
            return f"not wanted; removing an earlier one failed: {exc.message}"
        return ""
    try:
        await api.apply(render_pod_monitor(broker))
    except KubeApiError as exc:
        if exc.status != 404:
            raise
        return (
            "spec.metrics.podMonitor is true, but this cluster has no monitoring.coreos.com/v1 "
            "PodMonitor kind: install the Prometheus Operator (or its CRDs), or scrape port "
            "5557 (metrics) of the broker pods yourself"
        )
    made = f"PodMonitor {pod_monitor_name(broker.name)} scrapes port metrics of every broker pod"
    if not scraped:
        # Made all the same: naming the scrapers later needs no second step.
        return (
            f"{made}, but spec.metrics.allowFrom names no one (nor does the operator's "
            "--metrics-allow-from), so the brokers serve /metrics on their loopback only: add "
            "Prometheus's namespaceSelector and podSelector there"
        )
    return made


async def _name_clash(api: KubeClient, service: Mapping[str, Any], broker: BrokerIdentity) -> str:
    """Why the bootstrap Service cannot be this Broker's; "" if it can.

    A Broker named like another one's group (``orders-a`` beside ``orders``) would take
    over that group's client Service.
    """
    current = await api.get("Service", broker.namespace, service["metadata"]["name"])
    owners = ((current or {}).get("metadata") or {}).get("ownerReferences") or []
    other = next((o for o in owners if o.get("controller") and o.get("uid") != broker.uid), None)
    if other is None:
        return ""
    return (
        f"Service {service['metadata']['name']} belongs to {other.get('kind')} "
        f"{other.get('name')}, so it cannot be the bootstrap Service of Broker {broker.name}; "
        "a Broker must not be named like another Broker's group (<name>-<letters>): "
        "delete this Broker and create it under another name"
    )


async def forget_broker(name: str, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    """Deletion cascades through owner references; only the operator's own state goes."""
    memo.state.forget("Broker", namespace, name)
    memo.state.admin.forget(namespace, name)


async def refresh_broker_status(
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """Periodically: the certificate renewed when due, ready pods per group, Ready."""
    conditions = conditions_of(body)
    ready = next((c for c in conditions if c.get("type") == READY), None)
    state: OperatorState = memo.state
    broker_spec = BrokerSpec.from_manifest(spec)
    identity = BrokerIdentity(name, namespace, str(body.metadata.uid))
    async with state.lock_for("Broker", namespace, name):
        tls = await _ensure_certificate(state, identity, broker_spec)
        # A refusal or failure stays until the reconcile that set it succeeds.
        if ready is not None and ready.get("reason") in ("ScaleInRefused", "ApplyFailed"):
            patch.status["tls"] = tls.status()
            return
        await _refresh_status(state, body, name, namespace, broker_spec, patch, conditions, tls)


async def _refresh_status(
    state: OperatorState,
    body: kopf.Body,
    name: str,
    namespace: str,
    spec: BrokerSpec,
    patch: kopf.Patch,
    conditions: list[dict[str, Any]],
    tls: TlsState,
) -> None:
    generation = generation_of(body)
    identity = BrokerIdentity(name, namespace, str(body.metadata.uid))
    now = datetime.datetime.now(datetime.UTC)
    external, external_problem = await _publish_external_endpoints(state, identity, spec)
    group_status = []
    not_ready: list[str] = []
    no_master: list[str] = []
    rolling: list[str] = []
    draining: list[str] = []
    wanted = spec.replicas_per_group
    for index in range(spec.groups):
        suffix = group_suffix(index)
        set_name = group_name(name, index)
        stateful_set = await state.api.get("StatefulSet", namespace, set_name) or {}
        observed: Mapping[str, Any] = stateful_set.get("status") or {}
        ready = int(observed.get("readyReplicas") or 0)
        updated = int(observed.get("updatedReplicas") or 0)
        lease_object = await state.api.get("Lease", namespace, lease_name(name, index))
        await _adopt_lease(state.api, identity, lease_object)
        lease = read_lease(lease_object, now)
        entry: dict[str, Any] = {
            "name": suffix,
            "statefulSet": set_name,
            "replicas": wanted,
            "readyReplicas": ready,
            **lease.status_fields(),
            "serviceEndpoint": _client_endpoint(state, name, index, namespace),
            "externalEndpoint": external.get(set_name, ""),
            "externalRemotingEndpoint": external.get(external_remoting_key(set_name), ""),
        }
        if suffix in spec.drain_groups:
            progress = await _drain(state, body, index)
            entry["draining"] = True
            entry["unconsumedMessages"] = progress.unconsumed if progress else -1
            draining.append(_drain_line(suffix, progress))
        group_status.append(entry)
        if ready < wanted:
            not_ready.append(f"group {suffix}: {ready}/{wanted} pods ready")
            continue
        if not lease.master:
            no_master.append(
                f"group {suffix}: no broker holds its Lease {lease_name(name, index)} "
                "(the brokers elect one; see their logs if this lasts)"
            )
        if not _rolling_out(stateful_set, updated, wanted):
            continue
        if lease.master or not lease.exists:
            # No Lease at all: pods of a release that chose masters by ordinal; they
            # restart from the highest ordinal down, as that release's StatefulSet did.
            step = await _restart_next_pod(state, namespace, name, index, stateful_set, lease)
        else:
            step = ", waiting for a master to take the group's Lease"
        rolling.append(f"group {suffix}: {updated}/{wanted} pods updated{step}")
    patch.status["groups"] = group_status
    # Printer columns show one value of a list; this line shows every group's master.
    patch.status["masters"] = ",".join(f"{g['name']}={g['master'] or '-'}" for g in group_status)
    bootstrap = bootstrap_service_dns_name(name, namespace, state.config.cluster_domain)
    patch.status["clientEndpoint"] = f"{bootstrap}:{CLIENT_PORT}"
    patch.status["remotingEndpoint"] = f"{bootstrap}:{REMOTING_PORT}"
    patch.status["observedGeneration"] = generation
    patch.status["tls"] = tls.status()
    present = {group_suffix(index) for index in range(spec.groups)}
    for suffix in sorted(set(spec.drain_groups) - present):
        # Left over once a drained group went: it would drain a group added again later.
        draining.append(
            f"spec.drainGroups names group {suffix}, which this Broker does not have "
            "(any more); remove it from drainGroups"
        )
    # Draining does not make the Broker unready: it is told, as progress.
    progress_note = "".join(f"; {line}" for line in draining)
    if external_problem:
        # Told whatever else the status says; it alone makes a running Broker unready.
        progress_note += f"; {external_problem}"
    if tls.problem:
        # Said first: pods cannot start (or keep their certificate) until it is solved.
        message = "; ".join([tls.problem, *not_ready, *no_master, *rolling]) + progress_note
        _set_ready(patch, conditions, False, "CertificateNotReady", message, generation)
    elif not_ready:
        message = "; ".join(not_ready + rolling) + progress_note
        _set_ready(patch, conditions, False, "PodsNotReady", message, generation)
    elif no_master:
        message = "; ".join(no_master + rolling) + progress_note
        _set_ready(patch, conditions, False, "NoMaster", message, generation)
    elif rolling:
        message = "; ".join(rolling) + progress_note
        _set_ready(patch, conditions, False, "RollingOut", message, generation)
    elif external_problem:
        message = f"{spec.groups} group(s) of {wanted} pod(s) ready, each with a master"
        _set_ready(
            patch, conditions, False, "ExternalAddressUnknown", message + progress_note, generation
        )
    else:
        message = f"{spec.groups} group(s) of {wanted} pod(s) ready, each with a master"
        _set_ready(patch, conditions, True, "Ready", message + progress_note, generation)


async def _adopt_lease(
    api: KubeClient, broker: BrokerIdentity, lease: Mapping[str, Any] | None
) -> None:
    """Make the Broker own its group's Lease, so that the Lease goes with the Broker.

    The brokers create their Leases (the operator never writes one's spec) and keep
    whatever owners it has. The patch carries the resourceVersion read: it never
    recreates a Lease deleted meanwhile, nor overwrites a broker's newer write.
    """
    if lease is None:
        return
    meta = lease.get("metadata") or {}
    owners = list(meta.get("ownerReferences") or [])
    if any(owner.get("uid") == broker.uid for owner in owners):
        return
    patch = {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "ownerReferences": [*owners, owner_reference(broker)],
        }
    }
    try:
        await api.merge_patch("Lease", broker.namespace, meta["name"], patch)
    except KubeApiError as exc:
        if exc.status not in (404, 409):
            raise
        # Gone or written meanwhile: the next status pass tries again.


def _rolling_out(stateful_set: Mapping[str, Any], updated: int, wanted: int) -> bool:
    """Some pod does not run the StatefulSet's current template yet.

    Under ``OnDelete`` the StatefulSet controller never moves ``currentRevision`` to
    ``updateRevision``, so only the count of pods on the update revision tells.
    """
    status = stateful_set.get("status") or {}
    generation = int((stateful_set.get("metadata") or {}).get("generation") or 0)
    if int(status.get("observedGeneration") or 0) < generation:
        return True
    return updated < wanted


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
    write_ready(patch.status, conditions, status, reason, message, generation)


async def _scale_in_refusal(
    state: OperatorState, broker: Mapping[str, Any], removed: list[str], spec: BrokerSpec
) -> str:
    """Why the groups ``removed`` cannot go yet; empty if none holds a message it must keep.

    A group in ``spec.drainGroups`` may go once nothing on it is unconsumed; any other
    group only once it holds no message at all.
    """
    namespace, name = broker["metadata"]["namespace"], broker["metadata"]["name"]
    problems: list[str] = []
    for suffix in removed:
        index = group_index(suffix)
        endpoint = state.resolver.master_endpoint(namespace, name, index)
        try:
            access = await state.admin.access(broker)
            if suffix in spec.drain_groups:
                progress = await asyncio.to_thread(drain_group, endpoint, access)
                problems.extend(f"group {suffix} (draining) holds {t}" for t in progress.topics)
            else:
                held = await asyncio.to_thread(_held_messages, endpoint, access)
                problems.extend(f"group {suffix} {line}" for line in held)
        except SkiffError as exc:
            state.admin.note_failure(namespace, name, exc)
            problems.append(f"group {suffix} cannot be checked ({exc.message})")
    if not problems:
        return ""
    return (
        f"scaling in Broker {name} is refused: {'; '.join(problems)}. Removing the group "
        "would lose those messages; list the group in spec.drainGroups (its topics stop "
        "taking writes) and let consumers drain it, or set spec.groups back"
    )


async def _drain(
    state: OperatorState, broker: Mapping[str, Any], index: int
) -> DrainProgress | None:
    """Writes off on a draining group and what is left to consume; None if unreachable."""
    namespace, name = broker["metadata"]["namespace"], broker["metadata"]["name"]
    endpoint = state.resolver.master_endpoint(namespace, name, index)
    try:
        access = await state.admin.access(broker)
        return await asyncio.to_thread(drain_group, endpoint, access)
    except SkiffError as exc:
        state.admin.note_failure(namespace, name, exc)
        log.warning("draining group %s of Broker %s: %s", group_suffix(index), name, exc.message)
        return None


def _drain_line(suffix: str, progress: DrainProgress | None) -> str:
    if progress is None:
        return f"group {suffix}: draining, its master does not answer"
    if progress.unconsumed:
        return f"group {suffix}: draining, {progress.unconsumed} message(s) left to consume"
    return f"group {suffix}: drained, lower spec.groups to remove it"


async def _restart_next_pod(
    state: OperatorState,
    namespace: str,
    name: str,
    index: int,
    stateful_set: Mapping[str, Any],
    lease: GroupLease,
) -> str:
    """Delete the next outdated pod (replicas before the master); what happens, for status."""
    revision = str((stateful_set.get("status") or {}).get("updateRevision") or "")
    selector = f"{LABEL_BROKER}={name},{LABEL_GROUP}={group_suffix(index)}"
    pods = await state.api.list("Pod", namespace, selector)
    step = next_restart(pods, revision, lease.master, lease.in_sync)
    if step.pod:
        await state.api.delete("Pod", namespace, step.pod)
        log.info("restarting pod %s for the new template", step.pod)
        return f", restarting {step.pod}"
    return f", {step.waiting}" if step.waiting else ""


async def _publish_external_endpoints(
    state: OperatorState, broker: BrokerIdentity, spec: BrokerSpec
) -> tuple[dict[str, str], str]:
    """Keep ``<Broker>-endpoints``: group name -> external ``host:port``, and
    ``<group>.remoting`` -> its external remoting ``host:port`` (known ones only).

    Also returns why node ports have no host ("" if nothing is wrong): an operator
    installed with namespaced RBAC may not read nodes.
    """
    endpoints: dict[str, str] = {}
    problem = ""
    access = spec.external_access
    if access.enabled:
        nodes: list[dict[str, Any]] = []
        if access.type == "NodePort" and not access.advertised_host:
            try:
                nodes = await state.api.list("Node", "")
            except KubeApiError as exc:
                if exc.status != 403:
                    raise
                problem = (
                    "external access: the operator may not read the nodes' addresses (it "
                    "was installed with namespaced RBAC, rbac.clusterWide=false), so clients "
                    "outside the cluster get no address; set spec.externalAccess."
                    "advertisedHost to the host they reach the nodes at"
                )
        for index in range(spec.groups):
            service = await state.api.get(
                "Service", broker.namespace, external_service_name(broker.name, index)
            )
            group = group_name(broker.name, index)
            address = external_endpoint(service, nodes, access.advertised_host)
            if address:
                endpoints[group] = address
            remoting = external_endpoint(
                service, nodes, access.advertised_host, port_name=REMOTING_PORT_NAME
            )
            if remoting:
                endpoints[external_remoting_key(group)] = remoting
    name = endpoints_config_map_name(broker.name)
    current = await state.api.get("ConfigMap", broker.namespace, name)
    if current is not None and (current.get("data") or {}) == endpoints:
        return endpoints, problem  # every refresh would otherwise write the same object again
    await state.api.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": broker.namespace,
                "labels": broker_labels(broker.name),
                "ownerReferences": [owner_reference(broker)],
            },
            "data": endpoints,
        }
    )
    return endpoints, problem


def _held_messages(endpoint: str, access: AdminAccess) -> list[str]:
    """One line per topic that still holds messages on the broker at ``endpoint``."""
    held = []
    with access.client(endpoint) as admin:
        for topic in admin.list_topics():
            count = sum(q.max_offset - q.min_offset for q in admin.queue_offsets(topic.name))
            if count > 0:
                held.append(f"holds {count} message(s) in topic {topic.name!r}")
    return held


async def _delete_group(api: KubeClient, namespace: str, name: str, suffix: str) -> None:
    selector = f"{LABEL_BROKER}={name},{LABEL_GROUP}={suffix}"
    for kind in CHILD_KINDS:
        for item in await api.list(kind, namespace, selector):
            await api.delete(kind, namespace, item["metadata"]["name"])
