"""The session's cluster for e2e/: the real node when one is up, else kind, else a skip.

Where ``SKIFF_REQUIRE_NODE`` is set (CI), a missing real node fails the suite instead of
skipping it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator

import pytest
from e2e.clusters import (
    IMAGE_TAG,
    ROOT,
    Cluster,
    docker_engine_answers,
    real_node_from_environment,
    run,
)

NO_NODE = (
    "no real node is up (SKIFF_NODE_KUBECONFIG is unset): as root, run "
    "SKIFF_REQUIRE_NODE=1 scripts/test (it runs scripts/real-node up before pytest and down "
    "after), or run e2e/run where a Docker engine answers, for kind"
)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    node = real_node_from_environment()
    if node is not None:
        os.environ["KUBECONFIG"] = str(node.kubeconfig)
        yield node
        return
    if os.environ.get("SKIFF_REQUIRE_NODE"):
        pytest.fail(f"SKIFF_REQUIRE_NODE is set but {NO_NODE}")
    if not docker_engine_answers():
        pytest.skip(f"{NO_NODE}; and no Docker engine answers ('docker info' failed) for kind")
    for tool in ("kind", "kubectl", "helm"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not on PATH; run the kind suite with e2e/run")
    yield from _kind_cluster(tmp_path_factory)


def _kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    name = f"skiff-e2e-{uuid.uuid4().hex[:6]}"
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    os.environ["KUBECONFIG"] = str(kubeconfig)
    run("kind", "create", "cluster", "--name", name, "--wait", "180s")
    try:
        for target in ("broker", "operator"):
            tag = f"skiff/{target}:{IMAGE_TAG}"
            run("docker", "build", "-f", str(ROOT / "images" / "Dockerfile"),
                "--target", target, "-t", tag, str(ROOT))  # fmt: skip
            run("kind", "load", "docker-image", tag, "--name", name)
        yield Cluster(kubeconfig=kubeconfig, storage_class=None)
    finally:
        run("kind", "delete", "cluster", "--name", name, check=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Keep the test's own outcome on the item, so a fixture can tell a failure at teardown."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.call_report = report
