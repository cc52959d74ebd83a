"""Helpers of the kind suite (e2e/run)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE_TAG = "e2e"


def docker_engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def run(*command: str, input: str | None = None, check: bool = True) -> str:
    result = subprocess.run(command, input=input, capture_output=True, text=True, timeout=1800)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout
