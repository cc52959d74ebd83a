"""A kind cluster with Skiff's images loaded, for e2e/ only."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.kind_cluster import IMAGE_TAG, ROOT, docker_engine_answers, run


@pytest.fixture(scope="session")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if not docker_engine_answers():
        pytest.skip("no Docker engine answers ('docker info' failed); kind needs one")
    for tool in ("kind", "kubectl", "helm"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not on PATH; run the suite with e2e/run")
    name = f"skiff-e2e-{uuid.uuid4().hex[:6]}"
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    os.environ["KUBECONFIG"] = str(kubeconfig)
    run("kind", "create", "cluster", "--name", name, "--wait", "180s")
    try:
        for image in ("broker", "operator"):
            tag = f"skiff/{image}:{IMAGE_TAG}"
            run("docker", "build", "-f", str(ROOT / "images" / f"{image}.Dockerfile"),
                "-t", tag, str(ROOT))  # fmt: skip
            run("kind", "load", "docker-image", tag, "--name", name)
        yield kubeconfig
    finally:
        run("kind", "delete", "cluster", "--name", name, check=False)
