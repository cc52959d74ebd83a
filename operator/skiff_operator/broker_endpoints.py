"""Where the operator reaches a broker group's master (its admin gRPC service).

In a cluster that is the group's client Service, which selects the pod labelled
``skiff.io/role=master`` by the broker holding the group's Lease (the master is not a
fixed ordinal).
``EndpointResolver`` is the one place that decides it, so that an operator running
outside the cluster (or a test, where no pod DNS exists) can point it elsewhere with a
template.

Users go to the pod holding the group's Lease by name (not through the client Service,
whose role label may lag a failover): ``pod_endpoint`` uses the pod's DNS name under
the group's headless Service by default; with a custom template it formats that
template (which may use ``{pod}``), so an operator outside the cluster points both at
one place.
"""

from __future__ import annotations

import dataclasses

from .naming import (
    CLIENT_PORT,
    client_service_dns_name,
    group_name,
    group_suffix,
    headless_service_name,
)

# Fields a template may use: {namespace} {broker} {group} {group_name}
# {headless_service} {cluster_domain} {port} {client_service_dns_name}, and {pod} for
# the per-pod endpoint.
DEFAULT_TEMPLATE = "{client_service_dns_name}:{port}"
POD_TEMPLATE = "{pod}.{headless_service}.{namespace}.svc.{cluster_domain}:{port}"


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointResolver:
    template: str = DEFAULT_TEMPLATE
    cluster_domain: str = "cluster.local"

    def master_endpoint(self, namespace: str, broker: str, index: int) -> str:
        """``host:port`` of the admin service of group ``index``'s master."""
        return self._format(self.template, namespace, broker, index, pod="")

    def pod_endpoint(self, namespace: str, broker: str, index: int, pod: str) -> str:
        """``host:port`` of the admin service of one pod of group ``index``."""
        template = POD_TEMPLATE if self.template == DEFAULT_TEMPLATE else self.template
        return self._format(template, namespace, broker, index, pod=pod)

    def _format(self, template: str, namespace: str, broker: str, index: int, pod: str) -> str:
        try:
            return template.format(
                pod=pod,
                namespace=namespace,
                broker=broker,
                group=group_suffix(index),
                group_name=group_name(broker, index),
                headless_service=headless_service_name(broker, index),
                cluster_domain=self.cluster_domain,
                port=CLIENT_PORT,
                client_service_dns_name=client_service_dns_name(
                    broker, index, namespace, self.cluster_domain
                ),
            )
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"the broker endpoint template {template!r} is invalid ({exc}); use the "
                "fields {namespace} {broker} {group} {group_name} {headless_service} "
                "{cluster_domain} {port} {client_service_dns_name} (and {pod} per pod)"
            ) from None
