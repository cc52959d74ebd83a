"""Every broker setting has one name a user can find: in `skiff broker --help`, in the
documentation's options reference, and in what the operator renders for its pods.

A variable the operator renders that no option reads would silently do nothing in a
cluster; a reference row for an option that does not exist sends a user to an error.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
from docs.hooks.reference import render

from skiff_broker.cli import broker
from skiff_operator.broker_spec import BrokerSpec
from skiff_operator.rendering import BrokerIdentity, render_broker

ROOT = Path(__file__).resolve().parents[2]
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


def reference_table() -> dict[str, str]:
    """The options reference as the site shows it: option -> variable, row by row."""
    table = {}
    for row in render("<!-- reference:broker-options -->").splitlines()[2:]:
        option_cell, variable_cell = row.split(" | ")[:2]
        options = [o for o in re.findall(r"`(--[a-z0-9-]+)`", option_cell) if "--no-" not in o]
        variables = re.findall(r"`(SKIFF_[A-Z0-9_]+)`", variable_cell)
        assert len(options) == len(variables) == 1, f"one option and variable a row: {row}"
        table.update(zip(options, variables, strict=True))
    return table


def test_the_options_reference_lists_exactly_the_options_of_skiff_broker() -> None:
    table, options = reference_table(), broker_options()
    assert sorted(set(table) - set(options)) == [], "reference rows for options that do not exist"
    assert sorted(set(options) - set(table)) == [], "options the reference does not list"
    assert table == options


def test_every_option_of_skiff_broker_says_what_it_does() -> None:
    for param in broker.params:
        if isinstance(param, click.Option) and param.envvar:
            assert param.help, f"{param.opts} has no help: say what it does"


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
