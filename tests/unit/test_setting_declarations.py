"""Each `skiff broker` setting is declared once, on its config field, and the option is that
declaration: same default, same variable, values landing in that field.

A second, hand-written option or default beside a declaration would drift from it; these
tests fail as soon as one appears.
"""

from __future__ import annotations

import os
from collections import Counter

import click
import pytest

from skiff_broker.broker_options import broker_config, settings
from skiff_broker.cli import broker
from skiff_broker.config import BrokerConfig
from skiff_broker.ha.config import ReplicationMode, Role
from skiff_broker.store.config import FlushType, StoreConfig


def long_names(command: click.Command) -> list[str]:
    return [
        name
        for param in command.params
        if isinstance(param, click.Option) and param.name != "help"
        for name in param.opts
        if name.startswith("--")
    ]


def parsed(args: list[str]) -> BrokerConfig:
    """The config `skiff broker ARGS` would run with (nothing started)."""
    context = broker.make_context("broker", args)
    return broker_config(context.params)


@pytest.fixture(autouse=True)
def _no_skiff_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    # A SKIFF_* variable of the shell running the tests would change the defaults seen.
    for name in [name for name in os.environ if name.startswith("SKIFF_")]:
        monkeypatch.delenv(name)


def test_every_option_is_one_declared_field_and_every_declared_field_one_option() -> None:
    declared = [setting.option.name for setting in settings()]
    options = long_names(broker)
    assert [n for n, count in Counter(declared).items() if count > 1] == []
    assert [n for n, count in Counter(options).items() if count > 1] == []
    assert sorted(options) == sorted(declared)
    variables = [setting.option.env for setting in settings()]
    assert [v for v, count in Counter(variables).items() if count > 1] == []
    assert {str(p.envvar) for p in broker.params if p.name != "help"} == set(variables)


def test_skiff_broker_without_options_runs_the_config_defaults() -> None:
    expected = BrokerConfig(store=StoreConfig(data_dir=os.path.abspath("./skiff-data")))
    assert parsed([]) == expected


def test_each_kind_of_option_reaches_its_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKIFF_TRANSACTION_TIMEOUT", "2.5")
    config = parsed(
        [
            "--commit-log-file-size",
            "1g",
            "--index-file-entries",
            "400",
            "--flush-type",
            "SYNC_FLUSH",
            "--clean-file-forcibly",
            "--role",
            "replica",
            "--replication-mode",
            "sync",
            "--auth",
            "Enabled",
            "--cluster-peers",
            "10.0.0.2:8081, 10.0.0.3:8081",
            "--tls-cert",
            "certs/broker.pem",
            "--discard-damaged-state",
        ]
    )
    assert config.store.commit_log_file_size == 1024**3
    # Unless given, a hash slot for every four index keys.
    assert (config.store.max_index_num, config.store.max_hash_slot_num) == (400, 100)
    assert config.store.flush_type is FlushType.SYNC_FLUSH
    assert config.store.clean_file_forcibly_enable is True
    assert config.replication.role is Role.REPLICA
    assert config.replication.mode is ReplicationMode.SYNC
    assert config.auth.enabled is True
    assert config.cluster.peers == ["10.0.0.2:8081", "10.0.0.3:8081"]
    assert config.tls.cert_file == os.path.abspath("certs/broker.pem")
    assert config.discard_damaged_state is True
    assert config.transaction_timeout_s == 2.5


def test_a_value_out_of_range_names_the_option_and_its_bounds() -> None:
    with pytest.raises(click.BadParameter) as refused:
        parsed(["--default-read-queues", "0"])
    assert "1<=x<=1024" in refused.value.format_message()
    assert refused.value.param is not None
    assert "--default-read-queues" in refused.value.param.opts
