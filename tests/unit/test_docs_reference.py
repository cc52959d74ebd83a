"""The documentation's reference tables cover everything they are made from: every field
of every CRD in crds/, every metric the broker's conventions name, and no marker is left
unreplaced. (The options table is checked against `skiff broker` in test_broker_options;
the metrics table against a real broker's scrape in test_getting_started.)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from docs.hooks.reference import MARKER, crd_table, metrics_table, render

from skiff_broker.telemetry import conventions as cv

ROOT = Path(__file__).resolve().parents[2]


def _property_paths(schema: Any, path: str = "") -> set[str]:
    """Every property path of an OpenAPI schema, read key by key from the YAML."""
    found: set[str] = set()
    if not isinstance(schema, dict):
        return found
    for name, child in (schema.get("properties") or {}).items():
        child_path = f"{path}.{name}" if path else name
        found.add(child_path)
        found |= _property_paths(child, child_path)
        found |= _property_paths(child.get("items"), f"{child_path}[]")
    return found


def test_the_crd_reference_has_a_row_for_every_field_of_every_crd() -> None:
    table = crd_table()
    rows = set(re.findall(r"^\| `([^`]+)` \|", table, re.M))
    crd_files = sorted((ROOT / "crds").glob("*.yaml"))
    assert len(crd_files) == 3
    for crd_file in crd_files:
        crd = yaml.safe_load(crd_file.read_text())
        assert f"## {crd['spec']['names']['kind']}\n" in table
        for version in crd["spec"]["versions"]:
            paths = _property_paths(version["schema"]["openAPIV3Schema"])
            fields = {p for p in paths if p.split(".")[0] in ("spec", "status")}
            assert fields, crd_file.name
            assert sorted(fields - rows) == [], f"{crd_file.name}: fields without a row"


def test_the_metrics_reference_names_every_metric_the_broker_keeps() -> None:
    table = metrics_table()
    names = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.M))
    rocketmq = {value for value in vars(cv).values() if str(value).startswith("rocketmq_")}
    # The store's histograms as Prometheus names them: dots made underscores, unit added.
    store = {
        cv.APPEND_DURATION.replace(".", "_") + "_seconds",
        cv.FLUSH_DURATION.replace(".", "_") + "_seconds",
    }
    assert len(rocketmq) == 8
    assert sorted((rocketmq | store) - names) == []


def test_every_marker_becomes_its_table_and_an_unknown_one_fails_the_build() -> None:
    pages = sorted((ROOT / "docs").glob("**/*.md"))
    markers = {name for page in pages for name in MARKER.findall(page.read_text())}
    assert markers == {"broker-options", "crd-fields", "metrics"}
    for page in pages:
        assert not MARKER.search(render(page.read_text())), page
    with pytest.raises(ValueError, match="unknown reference table 'options'"):
        render("<!-- reference:options -->")
