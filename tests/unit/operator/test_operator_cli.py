"""``skiff-operator`` flags: bad settings stop it before it touches a cluster."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from skiff_operator.cli import main
from skiff_operator.config import OperatorConfig
from skiff_operator.metrics_access import parse_allow_from


def test_a_bad_endpoint_template_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["--broker-endpoint-template", "{pod_ip}:8081"])
    assert result.exit_code == 2
    assert "the broker endpoint template '{pod_ip}:8081' is invalid" in result.output


def test_intervals_must_be_positive() -> None:
    result = CliRunner().invoke(main, ["--status-interval", "0"])
    assert result.exit_code == 2
    assert "must be positive" in result.output


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("{not json", "is not JSON"),
        ('{"podSelector": {}}', "must be a JSON list of peers"),
        ('[{"ipBlock": {"cidr": "0.0.0.0/0"}}]', "is not a peer"),
        ("[{}]", "is not a peer"),
    ],
)
def test_bad_metrics_scrapers_are_a_usage_error(value: str, said: str) -> None:
    result = CliRunner().invoke(main, ["--metrics-allow-from", value])
    assert result.exit_code == 2
    assert said in result.output
    assert "namespaceSelector" in result.output


def test_metrics_scrapers_parse_as_network_policy_peers() -> None:
    peer = {"namespaceSelector": {"matchLabels": {"team": "obs"}}, "podSelector": {}}
    assert parse_allow_from(json.dumps([peer])) == (peer,)
    assert parse_allow_from("") == () == parse_allow_from("[]")


def test_every_flag_has_an_environment_variable() -> None:
    variables = [p.envvar for p in main.params if p.name not in ("help", "version")]
    assert all(isinstance(v, str) and v.startswith("SKIFF_OPERATOR_") for v in variables)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{group_name}.{namespace}.svc.example:{port}", "sample-a.default.svc.example:8081"),
        ("{group_name}.{namespace}.svc.{cluster_domain}:{port}",
         "sample-a.default.svc.cluster.local:8081"),
    ],
)  # fmt: skip
def test_endpoint_templates_from_the_help_text(template: str, expected: str) -> None:
    config = OperatorConfig(broker_endpoint_template=template)
    config.validate()
    assert config.endpoint_resolver().master_endpoint("default", "sample", 0) == expected
