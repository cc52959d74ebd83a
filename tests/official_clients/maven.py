"""Jars from Maven Central, resolved by Maven into the cache, for tests and benchmarks alike.

``ensure_maven_classpath(home, artifacts)`` writes a pom naming the artifacts under
``home``, lets ``mvn dependency:copy-dependencies`` gather them and their runtime
dependencies into ``home/lib`` and marks the folder complete with that pom: a second
call with the same artifacts returns at once, a changed list resolves again. Maven's own
repository is shared by every such folder (``${XDG_CACHE_HOME:-~/.cache}/skiff/m2``).
Nothing lands in the repository.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path


class InstallError(SystemExit):
    """An install step failed; the message says which and what to do."""


def skiff_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "skiff"


def run_install_step(
    command: list[str], what: str, cwd: Path | None = None, env: dict | None = None
) -> None:
    print(f"installing {what}: {' '.join(command)}", file=sys.stderr, flush=True)
    done = subprocess.run(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    if done.returncode != 0:
        raise InstallError(
            f"installing {what} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
            "Check that the package registry is reachable."
        )


@dataclasses.dataclass(frozen=True)
class MavenArtifact:
    group: str
    artifact: str
    version: str


def _pom(name: str, artifacts: list[MavenArtifact]) -> str:
    dependencies = "".join(
        f"<dependency><groupId>{a.group}</groupId><artifactId>{a.artifact}</artifactId>"
        f"<version>{a.version}</version></dependency>\n"
        for a in artifacts
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "<modelVersion>4.0.0</modelVersion>\n"
        # The group id caches made before this module existed were keyed with.
        f"<groupId>skiff.bench</groupId><artifactId>{name}</artifactId><version>1</version>\n"
        "<packaging>pom</packaging>\n"
        f"<dependencies>\n{dependencies}</dependencies>\n</project>\n"
    )


def ensure_maven_classpath(home: Path, artifacts: list[MavenArtifact]) -> Path:
    """A folder of jars: the artifacts and their runtime dependencies."""
    lib = home / "lib"
    complete = home / ".complete"
    pom = _pom(home.name, artifacts)
    if complete.exists() and complete.read_text() == pom:
        return lib
    if shutil.which("mvn") is None:
        raise InstallError(
            f"{home.name} needs Maven and a JDK 17: apt-get install maven openjdk-17-jdk-headless"
        )
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_text(pom)
    shutil.rmtree(lib, ignore_errors=True)
    run_install_step(
        [
            "mvn",
            "-q",
            "-B",
            f"-Dmaven.repo.local={skiff_cache() / 'm2'}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={lib}",
        ],
        f"{home.name} from Maven Central",
        cwd=home,
    )
    complete.write_text(pom)
    return lib
