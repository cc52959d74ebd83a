"""Installs the peer brokers and their Python clients from package registries, pinned.

Everything lands under ``${XDG_CACHE_HOME:-~/.cache}/skiff/peers/`` (never in the
repository) and a second call finds it there: Java brokers as a classpath of jars
that Maven assembles from Maven Central (tests/official_clients/maven.py, shared with
the tests), the NATS server built with ``go install`` from its Go module, Redis
from Debian's packages, the Python clients from PyPI into the running interpreter.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.official_clients

from tests.official_clients import maven
from tests.official_clients.maven import (
    InstallError,
    MavenArtifact,
    run_install_step,
    skiff_cache,
)

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


def cache_root() -> Path:
    return skiff_cache() / "peers"


def _run(command: list[str], what: str, cwd: Path | None = None, env: dict | None = None) -> None:
    try:
        run_install_step(command, what, cwd=cwd, env=env)
    except InstallError as exc:
        raise InstallError(f"{exc}\nOr skip this system with --systems.") from None


def ensure_python_clients() -> None:
    missing = [
        req for module, req in PYTHON_CLIENTS.items() if not importlib.util.find_spec(module)
    ]
    if missing:
        _run([sys.executable, "-m", "pip", "install", "--quiet", *missing], "Python clients")


def ensure_maven_classpath(name: str, version: str, artifacts: list[MavenArtifact]) -> Path:
    """A folder of jars: the artifacts and their runtime dependencies."""
    return maven.ensure_maven_classpath(cache_root() / f"{name}-{version}", artifacts)


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
