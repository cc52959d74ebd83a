"""The RocketMQ Dashboard, built unmodified from its source with Maven, as a jar the tests run.

The source is a git repository (``SKIFF_DASHBOARD_GIT``, by default the mirror at
``/work/.mirror/apache+rocketmq-dashboard/repo``); the commit is pinned here. The build
takes every Java dependency from Maven Central into the shared Maven cache and skips
only the frontend (its npm build and copy: the tests ask the REST endpoints the pages
call, not the pages), the tests and the style checks. The jar is kept under
``${XDG_CACHE_HOME:-~/.cache}/skiff/dashboard/<commit>``: a second run finds it there.
``ClientsUnavailable`` says in one line what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.official_clients import ClientsUnavailable
from tests.official_clients.maven import InstallError, run_install_step, skiff_cache

DASHBOARD_COMMIT = "770822bbc812bfd0c2a94aa0128ab6f59b50d076"
DEFAULT_SOURCE = "/work/.mirror/apache+rocketmq-dashboard/repo"
# Maven flags: no frontend (npm, its node download and the copy of its build), no tests,
# no style or licence checks. Everything else is the project's own build.
_SKIPS = [
    "-Dskip.installnodenpm",
    "-Dskip.npm",
    "-Dmaven.antrun.skip=true",
    "-Dmaven.test.skip=true",
    "-DskipTests",
    "-Dcheckstyle.skip",
    "-Drat.skip",
    "-Djacoco.skip",
]


def dashboard_jar() -> Path:
    """Build (once) and return the Dashboard's Spring Boot jar."""
    home = skiff_cache() / "dashboard" / DASHBOARD_COMMIT
    jar = home / "rocketmq-dashboard.jar"
    if jar.exists():
        return jar
    for tool in ("git", "java", "mvn"):
        if shutil.which(tool) is None:
            raise ClientsUnavailable(
                f"the RocketMQ Dashboard needs {tool}: "
                "apt-get install git openjdk-17-jdk-headless maven"
            )
    source = os.environ.get("SKIFF_DASHBOARD_GIT", DEFAULT_SOURCE)
    known = subprocess.run(
        ["git", "-C", source, "cat-file", "-e", f"{DASHBOARD_COMMIT}^{{commit}}"],
        capture_output=True,
    )
    if known.returncode != 0:
        raise ClientsUnavailable(
            f"the RocketMQ Dashboard's source (commit {DASHBOARD_COMMIT[:12]}) is not in {source}: "
            "set SKIFF_DASHBOARD_GIT to a clone of github.com/apache/rocketmq-dashboard"
        )
    tree = home / "source"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = subprocess.Popen(
        ["git", "-C", source, "archive", DASHBOARD_COMMIT], stdout=subprocess.PIPE
    )
    subprocess.run(["tar", "x", "-C", str(tree)], stdin=archive.stdout, check=True)
    archive.wait()
    try:
        run_install_step(
            [
                "mvn",
                "-q",
                "-B",
                f"-Dmaven.repo.local={skiff_cache() / 'm2'}",
                *_SKIPS,
                "package",
            ],
            "the RocketMQ Dashboard (Maven build)",
            cwd=tree,
        )
    except InstallError as exc:
        raise ClientsUnavailable(str(exc)) from None
    built = sorted((tree / "target").glob("rocketmq-dashboard-*.jar"))
    if not built:
        raise ClientsUnavailable(f"the Dashboard's build made no jar in {tree / 'target'}")
    partial = jar.with_suffix(".partial")
    shutil.copyfile(built[0], partial)
    partial.rename(jar)
    shutil.rmtree(tree, ignore_errors=True)
    return jar
