"""Who may scrape the brokers' /metrics: NetworkPolicy peers the user names.

The metrics name every topic and consumer group, so nobody is admitted by default. A
Broker's ``spec.metrics.allowFrom`` names its scrapers; a Broker that names none takes
the operator's default (``--metrics-allow-from``, the chart's ``metrics.allowFrom``);
with neither, the brokers bind /metrics on the pod's loopback. A peer is a
``namespaceSelector``, a ``podSelector`` or both, as in a NetworkPolicy rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

PEER_KEYS = frozenset({"namespaceSelector", "podSelector"})


def parse_allow_from(text: str) -> tuple[dict[str, Any], ...]:
    """The operator's default scrapers from their JSON text ("" or "[]": nobody)."""
    if not text.strip():
        return ()
    example = (
        '[{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": '
        '"monitoring"}}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": '
        '"prometheus"}}}]'
    )
    try:
        peers = json.loads(text)
    except ValueError as exc:
        raise ValueError(
            f"--metrics-allow-from is not JSON ({exc}); give a list of NetworkPolicy peers, "
            f"e.g. {example}"
        ) from None
    if not isinstance(peers, list):
        raise ValueError(f"--metrics-allow-from must be a JSON list of peers, e.g. {example}")
    for peer in peers:
        if (
            not isinstance(peer, dict)
            or not peer
            or not set(peer) <= PEER_KEYS
            or not all(isinstance(selector, dict) for selector in peer.values())
        ):
            raise ValueError(
                f"--metrics-allow-from: {json.dumps(peer)} is not a peer; each one holds a "
                f"namespaceSelector and/or a podSelector (label selectors), e.g. {example}"
            )
    return tuple(peers)


def scrapers(
    own: tuple[Mapping[str, Any], ...], default: tuple[Mapping[str, Any], ...]
) -> tuple[Mapping[str, Any], ...]:
    """The Broker's own scrapers, else the operator's default."""
    return own or default
