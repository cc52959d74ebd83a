"""Reading a broker's Prometheus endpoint (``BrokerProcess.metrics_url``) as a test sees it."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(metrics_url: str) -> Samples:
    """Sample name -> [(labels, value)] of one scrape."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def client_sessions(metrics_url: str, client_type: str) -> int:
    """How many sessions of ``client_type`` the broker's ``skiff_client_sessions`` counts."""
    return int(
        sum(
            value
            for labels, value in scrape(metrics_url).get("skiff_client_sessions", [])
            if labels.get("client_type") == client_type
        )
    )
