"""What a broker says when it cannot use the Kubernetes API server (real files, real sockets)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
import yaml

from skiff_broker.cluster.kube_client import KubeClient, KubeError


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "here",
                "clusters": [{"name": "here", "cluster": {"server": server}}],
                "users": [{"name": "broker", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "here", "context": {"cluster": "here", "user": "broker"}}],
            }
        )
    )
    return path


def test_a_missing_kubeconfig_says_which_setting_to_check(tmp_path: Path) -> None:
    with pytest.raises(KubeError, match="SKIFF_KUBECONFIG") as refused:
        KubeClient.from_environment(str(tmp_path / "absent.kubeconfig"))
    assert "absent.kubeconfig" in str(refused.value)


def test_outside_a_pod_without_a_kubeconfig_says_what_to_give(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(KubeError, match=r"not running in a Kubernetes pod.*SKIFF_KUBECONFIG"):
        KubeClient.from_environment("")


def test_an_api_server_that_is_not_there_is_a_kube_error_naming_it(tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{_closed_port()}"
    client = KubeClient.from_environment(str(_kubeconfig(tmp_path / "kubeconfig", server)))
    try:
        unreachable = re.escape(f"cannot reach the Kubernetes API server at {server}")
        with pytest.raises(KubeError, match=unreachable):
            client.get_lease("default", "orders-a")
    finally:
        client.close()
