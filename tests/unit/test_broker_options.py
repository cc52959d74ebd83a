"""Every broker setting has one name a user can find: in `skiff broker --help`, in the
README's options table, and in what the operator renders for its pods.

A variable the operator renders that no option reads would silently do nothing in a
cluster; a README row for an option that does not exist sends a user to an error.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from skiff_broker.cli import broker
from skiff_operator.broker_spec import BrokerSpec
from skiff_operator.rendering import BrokerIdentity, render_broker

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# Read from the environment only, never from an option, so that a secret stays out of
# `ps` (the option beside it names a file instead): variable -> the module reading it.
ENVIRONMENT_ONLY = {"SKIFF_HA_SECRET": ROOT / "broker" / "skiff_broker" / "cli.py"}


def broker_options() -> dict[str, str]:
    """Each `skiff broker` option's long name -> its environment variable."""
    options = {}
    for param in broker.params:
        if isinstance(param, click.Option) and param.envvar:
            (name,) = [o for o in param.opts if o.startswith("--")]
            options[name] = str(param.envvar)
    return options


def readme_table() -> dict[str, str]:
    """The README's `skiff broker` options table: option -> variable, row by row."""
    text = README.read_text()
    start = text.index("Every option is also an environment variable:")
    rows = []
    for line in text[start:].splitlines()[4:]:
        if not line.startswith("| `--"):
            break
        rows.append(line)
    table = {}
    for row in rows:
        option_cell, variable_cell = row.split(" | ")[:2]
        options = [o for o in re.findall(r"`(--[a-z0-9-]+)`", option_cell) if "--no-" not in o]
        variables = re.findall(r"`(SKIFF_[A-Z0-9_]+)`", variable_cell)
        assert len(options) == len(variables), f"README row pairs options and variables: {row}"
        table.update(zip(options, variables, strict=True))
    return table


def test_the_readme_table_lists_exactly_the_options_of_skiff_broker() -> None:
    table, options = readme_table(), broker_options()
    assert sorted(set(table) - set(options)) == [], "README rows for options that do not exist"
    assert sorted(set(options) - set(table)) == [], "options the README table does not list"
    assert table == options


def rendered_variables(spec: dict) -> set[str]:
    identity = BrokerIdentity("orders", "shop", "uid-1")
    names: set[str] = set()
    for group in render_broker(BrokerSpec.from_manifest(spec), identity, {}, True):
        names.update(group.config_map["data"])
        (container,) = group.stateful_set["spec"]["template"]["spec"]["containers"]
        names.update(entry["name"] for entry in container["env"])
    return {name for name in names if name.startswith("SKIFF_")}


def test_every_variable_the_operator_renders_is_read_by_the_broker() -> None:
    # Every feature on, so that every variable the operator can render is rendered.
    spec = {
        "groups": 2,
        "replicasPerGroup": 2,
        "externalAccess": {"type": "NodePort", "nodePortBase": 30911},
        "telemetry": {"otlpEndpoint": "http://collector:4317"},
        "tls": {"mode": "enforcing"},
        "metrics": {"podMonitor": True},
    }
    rendered = rendered_variables(spec)
    assert {"SKIFF_DEFAULT_READ_QUEUES", "SKIFF_AUTH_INIT_USER", "SKIFF_TLS_CA"} <= rendered
    read = set(broker_options().values())
    for name, module in ENVIRONMENT_ONLY.items():
        assert f'os.environ.get("{name}"' in module.read_text()
    assert sorted(rendered - read - set(ENVIRONMENT_ONLY)) == []
