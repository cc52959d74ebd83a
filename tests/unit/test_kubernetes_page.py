"""The Kubernetes page names the objects the operator makes for the Broker it applies.

"Apply the examples" applies examples/broker.yaml; every object name the page then lists
for that Broker must be one the operator gives it, so the page cannot describe another
Broker than the one the reader just applied.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from skiff_operator import naming
from skiff_operator.broker_spec import BrokerSpec
from skiff_operator.rendering import BrokerIdentity, RenderSettings, render_cluster, render_group

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "kubernetes.md"


def _applied_broker() -> dict:
    text = PAGE.read_text()
    section = text[text.index("## Apply the examples") :]
    section = section[: section.index("\n## ", 1)]
    (command,) = re.findall(r"kubectl apply (-f \S+(?: -f \S+)*)", section)
    (broker_file,) = [f for f in command.split()[1::2] if "broker" in f]
    (broker,) = [d for d in yaml.safe_load_all((ROOT / broker_file).read_text()) if d]
    assert broker["kind"] == "Broker"
    return broker


def test_the_objects_the_page_lists_are_the_applied_brokers() -> None:
    broker = _applied_broker()
    name = broker["metadata"]["name"]
    identity = BrokerIdentity(name, "default", "uid-1")
    spec = BrokerSpec.from_manifest(broker["spec"])
    cluster = render_cluster(identity, spec)
    group = render_group(spec, identity, 0, RenderSettings())
    made = {
        manifest["metadata"]["name"]
        for manifest in [
            *cluster.all(),
            group.config_map,
            group.headless_service,
            group.client_service,
            group.stateful_set,
            group.disruption_budget,
        ]
    } | {
        naming.ha_secret_name(name),
        naming.admin_secret_name(name),
        naming.tls_secret_name(name),
        naming.ca_secret_name(name),
        naming.endpoints_config_map_name(name),
        naming.external_service_name(name, 0),
        naming.network_policy_name(name, 0),
        naming.lease_name(name, 0),
        # "per broker group (skiff-a, skiff-b, …)"
        naming.group_name(name, 1),
    }
    text = PAGE.read_text()
    listed = text[text.index("## Apply the examples") : text.index("## Connect a client")]
    named = set(re.findall(rf"`({re.escape(name)}(?:-[a-z]+)*)`", listed))
    # The list covers the Broker's objects by their names, and names no other Broker's.
    assert {f"{name}-a", f"{name}-a-pods", f"{name}-admin", f"{name}-tls"} <= named
    assert sorted(named - made - {name}) == []
    assert "orders-" not in listed.replace("`Topic:orders", "")
