"""``skiff-operator`` flags: bad settings stop it before it touches a cluster."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from skiff_operator.cli import main
from skiff_operator.config import OperatorConfig


def test_a_bad_endpoint_template_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["--broker-endpoint-template", "{pod_ip}:8081"])
    assert result.exit_code == 2
    assert "the broker endpoint template '{pod_ip}:8081' is invalid" in result.output


def test_intervals_must_be_positive() -> None:
    result = CliRunner().invoke(main, ["--status-interval", "0"])
    assert result.exit_code == 2
    assert "must be positive" in result.output


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
