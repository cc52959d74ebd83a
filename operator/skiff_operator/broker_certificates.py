"""Keeps the Secret the brokers' pods mount for TLS, for whichever source ``spec.tls`` names.

Level-based like the rest of the Broker handling: each reconcile and each status pass
reads the Secrets as they are now and acts on that.

- managed (no secretName, no issuerRef): ``<broker>-ca`` is made once and kept (made with
  create-if-absent, so two passes never make two CAs); ``<broker>-tls`` is issued anew
  from it whenever ``certificates.reissue_reason`` says so. The pods keep running: the
  Secret is updated in place and the brokers re-read its files.
- cert-manager (issuerRef): the ``Certificate`` is applied; cert-manager writes the
  Secret. Until it has, the pods cannot start, and the status says so.
- the user's Secret (secretName): only read, to report its expiry and whether it holds
  a ca.crt; never written.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import logging
from collections.abc import Mapping
from typing import Any

from .broker_spec import BrokerSpec, CertificateSource
from .certificates import (
    CertificateContents,
    KeyPair,
    ca_problem,
    certificate_contents,
    issue_leaf,
    new_ca,
    not_after,
    reissue_reason,
)
from .kube_client import KubeApiError, KubeClient
from .naming import ca_secret_name
from .rendering import (
    CA_KEY_KEY,
    TLS_CA_KEY,
    TLS_CERT_KEY,
    TLS_KEY_KEY,
    BrokerIdentity,
    mounted_tls_secret,
    render_ca_secret,
    render_certificate,
    render_tls_secret,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class TlsState:
    """What the status tells of the certificate; ``problem`` keeps the pods from starting."""

    source: str
    secret_name: str = ""
    expires: datetime.datetime | None = None
    problem: str = ""
    user_secret_has_ca: bool = False

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {"source": self.source, "secretName": self.secret_name}
        status["notAfter"] = self.expires.strftime("%Y-%m-%dT%H:%M:%SZ") if self.expires else ""
        status["message"] = self.problem
        return status


def _decoded(secret: Mapping[str, Any] | None) -> dict[str, bytes]:
    data = (secret or {}).get("data") or {}
    return {key: base64.b64decode(value) for key, value in data.items()}


async def ensure_certificate(
    api: KubeClient,
    broker: BrokerIdentity,
    spec: BrokerSpec,
    cluster_domain: str,
    now: datetime.datetime,
) -> TlsState:
    """Make the mounted Secret what ``spec.tls`` asks for, as far as the operator can."""
    source = spec.tls.source
    if source == CertificateSource.NONE:
        return TlsState(source)
    secret_name = mounted_tls_secret(spec, broker.name)
    contents = certificate_contents(spec, broker.name, broker.namespace, cluster_domain)
    if source == CertificateSource.SECRET:
        return await _user_secret(api, broker, secret_name)
    if source == CertificateSource.CERT_MANAGER:
        try:
            certificate = await api.apply(render_certificate(spec, broker, contents))
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            return TlsState(
                source,
                secret_name,
                problem=(
                    "spec.tls.issuerRef needs cert-manager, and this cluster has no "
                    "certificates.cert-manager.io/v1: install cert-manager, or remove "
                    "issuerRef to have the operator issue the certificate from its own CA"
                ),
            )
        data = _decoded(await api.get("Secret", broker.namespace, secret_name))
        if TLS_CERT_KEY not in data or TLS_KEY_KEY not in data:
            return TlsState(
                source,
                secret_name,
                problem=(
                    f"waiting for cert-manager to issue {secret_name} (the pods cannot start "
                    f"without it{_cert_manager_says(certificate)}; kubectl describe "
                    f"certificate {secret_name} -n {broker.namespace} tells more)"
                ),
            )
        return TlsState(source, secret_name, _expiry(data[TLS_CERT_KEY]))
    return await _managed(api, broker, secret_name, contents, now)


def _cert_manager_says(certificate: Mapping[str, Any]) -> str:
    """cert-manager's own word on a Certificate it has not issued, if it gave one."""
    conditions = (certificate.get("status") or {}).get("conditions") or []
    ready: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    if ready.get("status") == "False" and ready.get("message"):
        return f"; cert-manager says: {ready['message']}"
    return ""


def _expiry(cert_pem: bytes) -> datetime.datetime | None:
    try:
        return not_after(cert_pem)
    except ValueError:
        return None


async def _user_secret(api: KubeClient, broker: BrokerIdentity, name: str) -> TlsState:
    source = CertificateSource.SECRET
    secret = await api.get("Secret", broker.namespace, name)
    if secret is None:
        return TlsState(
            source,
            name,
            problem=(
                f"Secret {name} (spec.tls.secretName) does not exist; the pods cannot start "
                f"without it: create it (type kubernetes.io/tls with tls.crt and tls.key, "
                f"and ca.crt for enforcing mode across groups)"
            ),
        )
    data = _decoded(secret)
    missing = [key for key in (TLS_CERT_KEY, TLS_KEY_KEY) if key not in data]
    if missing:
        return TlsState(
            source, name, problem=f"Secret {name} has no {' or '.join(missing)}: add them"
        )
    expires = _expiry(data[TLS_CERT_KEY])
    problem = "" if expires else f"the {TLS_CERT_KEY} of Secret {name} is no PEM certificate"
    return TlsState(source, name, expires, problem, user_secret_has_ca=TLS_CA_KEY in data)


async def _managed(
    api: KubeClient,
    broker: BrokerIdentity,
    secret_name: str,
    contents: CertificateContents,
    now: datetime.datetime,
) -> TlsState:
    source = CertificateSource.MANAGED
    ca_name = ca_secret_name(broker.name)
    ca_secret = await api.get("Secret", broker.namespace, ca_name)
    if ca_secret is None:
        # Create-if-absent: a CA already there (made meanwhile) is the one kept.
        if await api.create_once(
            render_ca_secret(broker, new_ca(broker.name, broker.namespace, now))
        ):
            log.info("made the CA %s of Broker %s", ca_name, broker.name)
        ca_secret = await api.get("Secret", broker.namespace, ca_name)
    ca_data = _decoded(ca_secret)
    ca = KeyPair(ca_data.get(TLS_CA_KEY, b""), ca_data.get(CA_KEY_KEY, b""))
    problem = ca_problem(ca)
    if problem:
        return TlsState(
            source,
            secret_name,
            problem=(
                f"the Broker's CA in Secret {ca_name} is unusable: {problem}; delete that "
                "Secret and the operator makes a new CA and certificate"
            ),
        )
    leaf_data = _decoded(await api.get("Secret", broker.namespace, secret_name))
    leaf = KeyPair(leaf_data.get(TLS_CERT_KEY, b""), leaf_data.get(TLS_KEY_KEY, b""))
    if not leaf_data:
        reason = "there is none yet"
    elif leaf_data.get(TLS_CA_KEY) != ca.cert_pem:
        reason = "its ca.crt is not the Broker's CA"
    else:
        reason = reissue_reason(leaf, ca.cert_pem, contents, now)
    if reason:
        leaf = issue_leaf(ca, broker.name, contents, now)
        await api.apply(render_tls_secret(broker, leaf, ca.cert_pem))
        log.info("issued the certificate %s of Broker %s: %s", secret_name, broker.name, reason)
    return TlsState(source, secret_name, not_after(leaf.cert_pem))
