"""Installs the peer brokers and their Python clients from package registries, pinned.

Everything lands under ``${XDG_CACHE_HOME:-~/.cache}/skiff/peers/`` (never in the
repository) and a second call finds it there: Java brokers as a classpath of jars
that ``mvn dependency:copy-dependencies`` assembles from Maven Central for a pom
written here, the NATS server built with ``go install`` from its Go module, Redis
from Debian's packages, the Python clients from PyPI into the running interpreter.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROCKETMQ_VERSION = "5.3.3"
KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"
NATS_MODULE = "github.com/nats-io/nats-server/v2"
NATS_VERSION = "v2.15.2"
REDIS_PACKAGE = "redis-server"  # Debian's; its version is recorded with the results

# module name -> pinned requirement
PYTHON_CLIENTS = {
    "redis": "redis==8.1.0",
    "hiredis": "hiredis==3.5.0",  # redis-py's C reply parser: the client's fastest mode
    "nats": "nats-py==2.16.0",
    "confluent_kafka": "confluent-kafka==2.16.1",
    "psutil": "psutil==7.2.2",
    "matplotlib": "matplotlib==3.11.2",
}


class InstallError(SystemExit):
    """An install step failed; the message says which and what to do."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "skiff" / "peers"


def _run(command: list[str], what: str, cwd: Path | None = None, env: dict | None = None) -> None:
    print(f"installing {what}: {' '.join(command)}", file=sys.stderr, flush=True)
    done = subprocess.run(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    if done.returncode != 0:
        raise InstallError(
            f"installing {what} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
            "Check that the package registry is reachable, or skip this system with --systems."
        )


def ensure_python_clients() -> None:
    missing = [
        req for module, req in PYTHON_CLIENTS.items() if not importlib.util.find_spec(module)
    ]
    if missing:
        _run([sys.executable, "-m", "pip", "install", "--quiet", *missing], "Python clients")


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
        f"<groupId>skiff.bench</groupId><artifactId>{name}</artifactId><version>1</version>\n"
        "<packaging>pom</packaging>\n"
        f"<dependencies>\n{dependencies}</dependencies>\n</project>\n"
    )


def ensure_maven_classpath(name: str, version: str, artifacts: list[MavenArtifact]) -> Path:
    """A folder of jars: the artifacts and their runtime dependencies."""
    home = cache_root() / f"{name}-{version}"
    lib = home / "lib"
    complete = home / ".complete"
    pom = _pom(name, artifacts)
    if complete.exists() and complete.read_text() == pom:
        return lib
    if shutil.which("mvn") is None:
        raise InstallError(f"{name} needs Maven: apt-get install maven (and a JDK 17)")
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_text(pom)
    shutil.rmtree(lib, ignore_errors=True)
    _run(
        [
            "mvn",
            "-q",
            "-B",
            f"-Dmaven.repo.local={cache_root() / 'm2'}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={lib}",
        ],
        f"{name} {version} from Maven Central",
        cwd=home,
    )
    complete.write_text(pom)
    return lib


def ensure_rocketmq() -> Path:
    return ensure_maven_classpath(
        "rocketmq",
        ROCKETMQ_VERSION,
        [
            MavenArtifact("org.apache.rocketmq", "rocketmq-proxy", ROCKETMQ_VERSION),
            MavenArtifact("org.apache.rocketmq", "rocketmq-namesrv", ROCKETMQ_VERSION),
        ],
    )


def ensure_kafka() -> Path:
    return ensure_maven_classpath(
        "kafka",
        KAFKA_VERSION,
        [
            MavenArtifact("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
            MavenArtifact("org.apache.kafka", "kafka-tools", KAFKA_VERSION),
            MavenArtifact("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
        ],
    )


def ensure_nats() -> Path:
    folder = cache_root() / "nats" / NATS_VERSION
    binary = folder / "nats-server"
    if binary.exists():
        return binary
    if shutil.which("go") is None:
        raise InstallError("NATS is built from its Go module: install Go 1.24 or newer")
    env = {**os.environ, "GOBIN": str(folder), "GOFLAGS": "-modcacherw"}
    _run(["go", "install", f"{NATS_MODULE}@{NATS_VERSION}"], f"nats-server {NATS_VERSION}", env=env)
    return binary


def ensure_redis() -> Path:
    found = shutil.which("redis-server")
    if found is None:
        if os.geteuid() != 0:
            raise InstallError(
                "Redis comes from Debian's packages: run `sudo apt-get install redis-server`"
            )
        _run(["apt-get", "update", "-qq"], "the Debian package lists")
        _run(["apt-get", "install", "-y", "-qq", REDIS_PACKAGE], "redis-server from Debian")
        found = shutil.which("redis-server")
        if found is None:
            raise InstallError("redis-server is still missing after apt-get install")
    return Path(found)


def redis_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout
    for word in out.split():
        if word.startswith("v="):
            return word[2:]
    return out.strip()


def java_binary() -> str:
    found = shutil.which("java")
    if found is None:
        raise InstallError(
            "RocketMQ and Kafka need a JDK 17: apt-get install openjdk-17-jdk-headless"
        )
    return found
