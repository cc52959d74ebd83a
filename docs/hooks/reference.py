"""The reference pages' tables, made from the code when the site is built.

An MkDocs hook (``hooks:`` in mkdocs.yml): a page that holds a marker such as
``<!-- reference:broker-options -->`` gets the table in its place. Each table is read from
the one place its facts are declared, so the site cannot say what the code does not do:

- broker options from the setting declarations ``skiff broker`` makes its options from
  (``skiff_broker.broker_options.settings``), with the defaults ``--help`` shows;
- CRD fields from the CustomResourceDefinitions in ``crds/``, every property of every
  version's schema, nested ones included;
- metrics from a real Prometheus scrape of the broker's own instruments (the registry
  ``--metrics-listen`` serves), after one sample of each, so a metric's name, type and
  help are what a scraper reads.

A marker that names no table is an error: the build fails rather than leave it in.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
MARKER = re.compile(r"<!-- reference:([a-z-]+) -->")


def _this_checkout() -> None:
    """Import the broker from this checkout, before any installed copy: the site documents
    this tree. Called when a table is made, since MkDocs restores ``sys.path`` after
    loading a hook."""
    for package_root in (ROOT / "operator", ROOT / "broker"):
        if str(package_root) not in sys.path:
            sys.path.insert(0, str(package_root))
    loaded = sys.modules.get("skiff_broker")
    if loaded is not None and not str(loaded.__file__).startswith(str(ROOT)):
        raise RuntimeError(
            f"skiff_broker is already imported from {loaded.__file__}, not from {ROOT}; "
            "build the site in a process of its own (mkdocs build)"
        )


def _cell(text: object) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


# -- broker options -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OptionRow:
    names: str  # e.g. "--flush-type" or "--clean-file-forcibly / --no-clean-file-forcibly"
    option: str  # the long option alone, e.g. "--flush-type"
    variable: str
    default: str
    help: str


def option_rows() -> list[OptionRow]:
    """Every ``skiff broker`` option, in the order ``--help`` lists them."""
    _this_checkout()
    from skiff_broker.broker_options import option_arguments, settings

    rows = []
    for setting in settings():
        declarations, details = option_arguments(setting)
        choice = getattr(details.get("type"), "choices", None)
        shown = details["show_default"]
        if isinstance(shown, str):
            default = shown
        elif setting.kind is bool and not setting.option.words:
            default = "on" if setting.default else "off"
        elif shown and details["default"] not in ("", None):
            default = f"`{details['default']}`"
        elif setting.kind is bool:
            default = "on" if setting.default else "off"
        else:
            default = "—"
        help_text = setting.option.help
        if choice:
            help_text = f"{help_text} One of: {', '.join(f'`{c}`' for c in choice)}."
        rows.append(
            OptionRow(
                names=" / ".join(f"`{name}`" for name in declarations[0].split("/")),
                option=setting.option.name,
                variable=setting.option.env,
                default=default,
                help=help_text.strip(),
            )
        )
    return rows


def broker_options_table() -> str:
    lines = ["| option | variable | default | meaning |", "|---|---|---|---|"]
    for row in option_rows():
        lines.append(f"| {row.names} | `{row.variable}` | {row.default} | {_cell(row.help)} |")
    return "\n".join(lines)


# -- CRD fields ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CrdField:
    kind: str
    version: str
    path: str  # e.g. "spec.externalAccess.nodePortBase"; list items as "[]"
    type: str
    default: str
    rules: str  # enum, bounds, patterns
    description: str


def _rules(schema: dict[str, Any]) -> str:
    found = []
    if "enum" in schema:
        found.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    for key, word in (("minimum", "≥"), ("maximum", "≤")):
        if key in schema:
            found.append(f"{word} {schema[key]}")
    for key, word in (("minLength", "length ≥"), ("maxLength", "length ≤")):
        if key in schema:
            found.append(f"{word} {schema[key]}")
    for key, word in (("minItems", "items ≥"), ("maxItems", "items ≤")):
        if key in schema:
            found.append(f"{word} {schema[key]}")
    if "pattern" in schema:
        # A quantity's pattern is long and says only that.
        long = len(schema["pattern"]) > 60
        found.append("a quantity (e.g. `10Gi`)" if long else f"matches `{schema['pattern']}`")
    return "; ".join(found)


def _type(schema: dict[str, Any]) -> str:
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {schema.get('items', {}).get('type', 'any')}"
    if kind == "object" and "additionalProperties" in schema and "properties" not in schema:
        value = schema["additionalProperties"]
        return f"map of {value.get('type', 'any')}" if isinstance(value, dict) else "map"
    if schema.get("x-kubernetes-int-or-string"):
        return "integer or string"
    return str(kind)


def _walk(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, child in schema.get("properties", {}).items():
        child_path = f"{path}.{name}" if path else name
        yield child_path, child
        yield from _walk(child, child_path)
        items = child.get("items")
        if isinstance(items, dict) and "properties" in items:
            yield from _walk(items, f"{child_path}[]")


def crd_fields(crd_file: Path) -> list[CrdField]:
    """Every property under ``spec`` and ``status`` of each version of one CRD."""
    crd = yaml.safe_load(crd_file.read_text())
    kind = crd["spec"]["names"]["kind"]
    fields = []
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        for path, child in _walk(schema, ""):
            if path.split(".")[0].split("[")[0] not in ("spec", "status"):
                continue
            default = child.get("default", None)
            fields.append(
                CrdField(
                    kind=kind,
                    version=version["name"],
                    path=path,
                    type=_type(child),
                    default="" if default is None else f"`{json.dumps(default)}`",
                    rules=_rules(child),
                    description=child.get("description", ""),
                )
            )
    return fields


def crd_files() -> list[Path]:
    return sorted(CRDS.glob("*.yaml"))


def crd_table() -> str:
    parts = []
    for crd_file in crd_files():
        crd = yaml.safe_load(crd_file.read_text())
        names = crd["spec"]["names"]
        short = ", ".join(f"`{n}`" for n in names.get("shortNames", []))
        parts.append(f"## {names['kind']}\n")
        versions = ", ".join(v["name"] for v in crd["spec"]["versions"])
        parts.append(
            f"`{crd['spec']['group']}/{versions}`, kind `{names['kind']}` "
            f"(plural `{names['plural']}`{', short names ' + short if short else ''}), "
            f"from `crds/{crd_file.name}`.\n"
        )
        parts.append("| field | type | default | rules | meaning |")
        parts.append("|---|---|---|---|---|")
        for field in crd_fields(crd_file):
            parts.append(
                f"| `{field.path}` | {field.type} | {_cell(field.default)} | "
                f"{_cell(field.rules)} | {_cell(field.description)} |"
            )
        parts.append("")
    return "\n".join(parts)


# -- metrics ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MetricRow:
    name: str
    type: str
    labels: tuple[str, ...]
    help: str


def _scrape() -> str:
    """The text a scrape of a broker's /metrics returns, with one sample of each metric."""
    _this_checkout()
    from prometheus_client import generate_latest

    from skiff_broker.delivery.backlog import GroupBacklog
    from skiff_broker.telemetry import conventions as cv
    from skiff_broker.telemetry.setup import telemetry_from_env

    # Port 0 and never started: only the registry behind the endpoint is read.
    telemetry = telemetry_from_env("broker-a", metrics_listen="127.0.0.1:0")
    try:
        traffic = telemetry.traffic_observer(
            cluster=cv.DEFAULT_CLUSTER,
            node_id="broker-a",
            backlog=lambda: [GroupBacklog("demo", "demo-readers", 1, 0)],
        )
        traffic.received("demo", cv.MESSAGE_TYPE_NORMAL, [100])
        traffic.delivered("demo", "demo-readers", 1, 100)
        telemetry.store_observer()  # makes the store's latency histograms
        assert telemetry.histograms is not None and telemetry.metrics_endpoint is not None
        for histogram in telemetry.histograms.histograms():
            histogram.record(0.001, tuple("x" for _ in histogram.labels))
        return generate_latest(telemetry.metrics_endpoint.registry).decode()
    finally:
        telemetry.shutdown()


def metric_rows() -> list[MetricRow]:
    """Each metric family a scrape shows: name, type, labels, help."""
    text = _scrape()
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.M))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    rows = []
    for name, kind in types.items():
        sample = re.search(rf"^{re.escape(name)}(?:_total|_bucket|_count)?\{{(.*?)\}}", text, re.M)
        labels = tuple(re.findall(r'(\w+)="', sample.group(1))) if sample else ()
        shown = name + "_total" if kind == "counter" and not name.endswith("_total") else name
        rows.append(
            MetricRow(
                name=shown,
                type=kind,
                labels=tuple(label for label in labels if label != "le"),
                help=helps.get(name, ""),
            )
        )
    return rows


def metrics_table() -> str:
    lines = ["| metric | type | labels | help |", "|---|---|---|---|"]
    for row in metric_rows():
        labels = ", ".join(f"`{label}`" for label in row.labels)
        lines.append(f"| `{row.name}` | {row.type} | {labels} | {_cell(row.help)} |")
    return "\n".join(lines)


# -- the hook -----------------------------------------------------------------------

TABLES = {
    "broker-options": broker_options_table,
    "crd-fields": crd_table,
    "metrics": metrics_table,
}


def render(markdown: str) -> str:
    """``markdown`` with each reference marker replaced by its table."""

    def table(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in TABLES:
            raise ValueError(f"unknown reference table {name!r}; known: {sorted(TABLES)}")
        return TABLES[name]()

    return MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return render(markdown)
