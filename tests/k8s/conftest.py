"""A session-wide etcd + kube-apiserver (RBAC on) for every test in tests/k8s/."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from tests.support.kube_control_plane import (
    REPO_ROOT,
    ControlPlane,
    binaries_dir,
    running_control_plane,
)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    bin_dir = binaries_dir()
    if bin_dir is None:
        message = (
            "kube-apiserver, kube-controller-manager, etcd, kubectl and helm are not built; "
            "run scripts/k8s-binaries (scripts/test does) or point SKIFF_K8S_BIN at a folder "
            "holding them"
        )
        if os.environ.get("SKIFF_REQUIRE_K8S"):
            pytest.fail(f"SKIFF_REQUIRE_K8S is set: {message}")
        pytest.skip(message)
    with running_control_plane(bin_dir, tmp_path_factory.mktemp("control-plane")) as plane:
        yield plane


@pytest.fixture(scope="session")
def crds(control_plane: ControlPlane) -> ControlPlane:
    """The control plane with Skiff's CRDs installed and established."""
    control_plane.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
    control_plane.kubectl(
        "wait", "--for", "condition=Established", "--timeout", "60s",
        "crd/brokers.skiff.io", "crd/topics.skiff.io", "crd/users.skiff.io",
    )  # fmt: skip
    return control_plane
