"""The Kubernetes clusters the end-to-end suite runs on, and how it talks to them.

Two kinds, one test body:

- the real node (``scripts/real-node up``; ``scripts/test`` brings it up when
  ``SKIFF_REQUIRE_NODE`` is set, as ``.ci/run`` does): kubelet and containerd on this machine,
  images imported into containerd, static local persistent volumes of the class
  ``skiff-local``;
- kind (``e2e/run``), where a Docker engine answers: images loaded with ``kind load``, the
  cluster's default (provisioned) StorageClass.

Every command runs with a timeout and fails with its output, so a stuck cluster fails a test
instead of hanging it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE_TAG = "e2e"


@dataclasses.dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    # The StorageClass of the brokers' data claims; None takes the cluster's default.
    storage_class: str | None
    # The real node's containerd socket (host PIDs of containers); None on kind.
    containerd_socket: Path | None = None
    # An address of this machine that pods reach (the real node's); None on kind.
    host_address: str | None = None

    @property
    def is_real_node(self) -> bool:
        return self.containerd_socket is not None


def docker_engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def run(*command: str, input: str | None = None, check: bool = True) -> str:
    result = subprocess.run(command, input=input, capture_output=True, text=True, timeout=1800)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def real_node_from_environment() -> Cluster | None:
    """The node ``scripts/real-node env`` describes, if one is up."""
    kubeconfig = os.environ.get("SKIFF_NODE_KUBECONFIG")
    if not kubeconfig:
        return None
    return Cluster(
        kubeconfig=Path(kubeconfig),
        storage_class="skiff-local",
        containerd_socket=Path(os.environ["SKIFF_NODE_CONTAINERD"]),
        host_address=os.environ["SKIFF_NODE_IP"],
    )
