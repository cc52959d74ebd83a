"""``skiff-operator`` flags: bad settings, and missing credentials, stop it before it
touches a cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


def _operator(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``skiff-operator`` as a process, in a home with no ~/.kube and outside any pod."""
    environment = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    environment.update(HOME=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path), **env)
    return subprocess.run(
        [sys.executable, "-m", "skiff_operator", "--log-format", "plain"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("kubeconfig", "said"),
    [
        (None, "no Kubernetes credentials found"),
        ("missing", "cannot read the kubeconfig ([Errno 2] No such file or directory"),
        ("garbage: [\n", "cannot read the kubeconfig (while parsing"),
    ],
)
def test_without_credentials_it_says_what_to_give_in_one_line_and_exits(
    tmp_path: Path, kubeconfig: str | None, said: str
) -> None:
    env = {}
    if kubeconfig is not None:
        path = tmp_path / "kubeconfig"
        if kubeconfig != "missing":
            path.write_text(kubeconfig)
        env["KUBECONFIG"] = str(path)
    result = _operator(tmp_path, env)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: ") and said in line
    assert "ServiceAccount" in line and "KUBECONFIG" in line
    assert "Traceback" not in result.stderr + result.stdout


def test_help_names_every_resource_it_runs() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "Broker, Topic and User resources" in result.output
    assert "kubeconfig" in result.output
