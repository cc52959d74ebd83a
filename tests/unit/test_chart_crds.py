"""The Helm chart's CRDs are generated from crds/ by scripts/chart-crds, which CI checks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMMAND = ROOT / "scripts" / "chart-crds"


def chart_crds(root: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(COMMAND), "--root", str(root), *flags],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_chart_holds_what_crds_generates() -> None:
    checked = chart_crds(ROOT, "--check")
    assert checked.returncode == 0, checked.stderr
    for source in sorted((ROOT / "crds").glob("*.yaml")):
        copy = ROOT / "charts" / "skiff" / "crds" / source.name
        assert yaml.safe_load(copy.read_text()) == yaml.safe_load(source.read_text())


def test_a_changed_crd_fails_the_check_until_the_command_is_run(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "crds", tmp_path / "crds")
    shutil.copytree(ROOT / "charts" / "skiff" / "crds", tmp_path / "charts" / "skiff" / "crds")
    source = tmp_path / "crds" / "skiff.io_topics.yaml"
    source.write_text(
        source.read_text().replace("shortNames: [skt, ", "shortNames: [sktp, skt, ", 1)
    )
    (tmp_path / "charts" / "skiff" / "crds" / "skiff.io_gone.yaml").write_text("kind: Gone\n")

    checked = chart_crds(tmp_path, "--check")
    assert checked.returncode == 1
    assert (
        "charts/skiff/crds/skiff.io_topics.yaml differs from crds/skiff.io_topics.yaml: "
        "run scripts/chart-crds"
    ) in checked.stderr
    assert "charts/skiff/crds/skiff.io_gone.yaml has no source in crds/" in checked.stderr
    assert "skiff.io_brokers.yaml" not in checked.stderr

    assert chart_crds(tmp_path).returncode == 0
    assert chart_crds(tmp_path, "--check").returncode == 0
    copy = tmp_path / "charts" / "skiff" / "crds" / "skiff.io_topics.yaml"
    assert "sktp" in yaml.safe_load(copy.read_text())["spec"]["names"]["shortNames"]
    assert not (tmp_path / "charts" / "skiff" / "crds" / "skiff.io_gone.yaml").exists()
