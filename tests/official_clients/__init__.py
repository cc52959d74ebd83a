"""The official RocketMQ Java and Go clients as programs the tests and benchmarks run.

``java/OfficialClient.java`` (rocketmq-client-java from Maven Central), ``go/main.go``
(github.com/apache/rocketmq-clients/golang/v5 from the Go module proxy, pinned with
``go/go.sum``) and ``go_remoting/main.go`` (github.com/apache/rocketmq-client-go/v2, the
remoting protocol, pinned with ``go_remoting/go.sum``) are built on first use into
``${XDG_CACHE_HOME:-~/.cache}/skiff/official-clients``, under a folder named by the client
version and a hash of the source: a second run, or a second process, finds the build there.
Each program prints one JSON object on stdout.

``ClientsUnavailable`` says what is missing (a JDK, Maven, Go, a registry); callers decide
whether that skips or fails. The client programs write their own log files into the
``log_dir`` given to them, never into the home directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tests.official_clients.maven import (
    InstallError,
    MavenArtifact,
    ensure_maven_classpath,
    run_install_step,
    skiff_cache,
)

T = TypeVar("T")

JAVA_CLIENT_VERSION = "5.2.0"
# The classic remoting client (DefaultMQProducer, DefaultMQPushConsumer, ...).
REMOTING_CLIENT_VERSION = "4.9.8"
GO_CLIENT_VERSION = "v5.1.2"  # also in go/go.mod, which go/go.sum verifies
# The Go client v2 (remoting protocol); also in go_remoting/go.mod, pinned by its go.sum.
GO_REMOTING_CLIENT_VERSION = "v2.1.3-0.20251226070945-2173d070fd1b"
SOURCES = Path(__file__).resolve().parent
# Generous: a cold JVM or Go binary, the client's start-up and one long poll per receive.
RUN_TIMEOUT_S = 180.0


class ClientsUnavailable(Exception):
    """A client program cannot be built here; the message says what to install."""


def _build_home(kind: str, version: str, *sources: Path) -> Path:
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.read_bytes())
    return skiff_cache() / "official-clients" / f"{kind}-{version}-{digest.hexdigest()[:12]}"


def _go_binary(what: str) -> str:
    """``go`` from PATH, else the toolchain scripts/go-toolchain keeps in the cache."""
    found = shutil.which("go")
    if found:
        return found
    cached = sorted((skiff_cache() / "go").glob("go*/bin/go"))
    if cached:
        return str(cached[-1])
    raise ClientsUnavailable(
        f"{what} needs Go >= 1.22: run scripts/go-toolchain (scripts/test does)"
    )


@dataclasses.dataclass(frozen=True)
class JavaClient:
    """The compiled Java program: ``command(mode, ...)`` is its command line."""

    classpath: str
    main_class: str = "OfficialClient"

    def command(self, mode: str, log_dir: Path, **options: object) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise ClientsUnavailable("the official Java client needs a JDK 17 on PATH")
        return [
            java,
            f"-Drocketmq.log.root={log_dir}",
            "-cp",
            self.classpath,
            self.main_class,
            mode,
            *_flags(options),
        ]


def _java_program(
    main_class: str,
    sources: list[Path],
    artifacts: list[MavenArtifact],
    *,
    libs: str,
    home: str,
    version: str,
    what: str,
) -> JavaClient:
    """Build (once) ``main_class`` from ``sources`` against ``artifacts`` from Maven Central.

    ``libs`` names the folder of the artifacts (one per set, so no two programs rebuild
    each other's), ``home`` the folder of the compiled classes; ClientsUnavailable says
    what is missing.
    """
    for tool in ("java", "javac", "mvn"):
        if shutil.which(tool) is None:
            raise ClientsUnavailable(
                f"{what} needs {tool}: apt-get install openjdk-17-jdk-headless maven"
            )
    try:
        lib = ensure_maven_classpath(skiff_cache() / "official-clients" / libs, artifacts)
        built = _build_home(home, version, *sources)
        classes = built / "classes"
        if not (classes / f"{main_class.replace('.', '/')}.class").exists():
            partial = built / "classes.partial"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            run_install_step(
                ["javac", "-cp", f"{lib}/*", "-d", str(partial), *map(str, sources)],
                f"{what}'s program",
            )
            partial.rename(classes)
    except InstallError as exc:
        raise ClientsUnavailable(str(exc)) from None
    return JavaClient(f"{classes}{os.pathsep}{lib}/*", main_class=main_class)


def java_client() -> JavaClient:
    """Build (once) and return the Java program."""
    return _java_program(
        "OfficialClient",
        [SOURCES / "java" / "OfficialClient.java"],
        [MavenArtifact("org.apache.rocketmq", "rocketmq-client-java", JAVA_CLIENT_VERSION)],
        libs=f"java-{JAVA_CLIENT_VERSION}",
        home="java",
        version=JAVA_CLIENT_VERSION,
        what="the official Java client",
    )


def remoting_java_client() -> JavaClient:
    """Build (once) and return ``java/RemotingClient.java`` on rocketmq-client 4.x."""
    return _java_program(
        "RemotingClient",
        [SOURCES / "java" / "RemotingClient.java"],
        [MavenArtifact("org.apache.rocketmq", "rocketmq-client", REMOTING_CLIENT_VERSION)],
        libs=f"java-remoting-{REMOTING_CLIENT_VERSION}",
        home="java-remoting",
        version=REMOTING_CLIENT_VERSION,
        what="the RocketMQ 4.x client",
    )


def remoting_bench_java_client() -> JavaClient:
    """Build (once) and return ``java/RemotingBench.java`` (the 4.x client's throughput
    workloads) on rocketmq-client 4.x, the jars RemotingClient.java uses."""
    return _java_program(
        "RemotingBench",
        [SOURCES / "java" / "RemotingBench.java"],
        [MavenArtifact("org.apache.rocketmq", "rocketmq-client", REMOTING_CLIENT_VERSION)],
        libs=f"java-remoting-{REMOTING_CLIENT_VERSION}",
        home="java-remoting-bench",
        version=REMOTING_CLIENT_VERSION,
        what="the RocketMQ 4.x client's benchmark",
    )


def remoting_security_java_client() -> JavaClient:
    """Build (once) and return ``java/RemotingSecurityClient.java`` (with RemotingClient.java's
    helpers) on rocketmq-client and rocketmq-acl 4.x: ACL signatures and TLS."""
    return _java_program(
        "RemotingSecurityClient",
        [
            SOURCES / "java" / "RemotingClient.java",
            SOURCES / "java" / "RemotingSecurityClient.java",
        ],
        [
            MavenArtifact("org.apache.rocketmq", "rocketmq-client", REMOTING_CLIENT_VERSION),
            MavenArtifact("org.apache.rocketmq", "rocketmq-acl", REMOTING_CLIENT_VERSION),
        ],
        libs=f"java-remoting-acl-{REMOTING_CLIENT_VERSION}",
        home="java-remoting-security",
        version=REMOTING_CLIENT_VERSION,
        what="the RocketMQ 4.x client with ACL",
    )


@dataclasses.dataclass(frozen=True)
class GoClient:
    binary: Path

    def command(self, **options: object) -> list[str]:
        return [str(self.binary), *_flags(options)]


def go_client() -> GoClient:
    """Build (once) and return the Go program."""
    folder = SOURCES / "go"
    home = _build_home(
        "go", GO_CLIENT_VERSION, folder / "main.go", folder / "go.mod", folder / "go.sum"
    )
    binary = home / "official-client-go"
    go_build(folder, ".", binary, f"the Go client program (golang/v5 {GO_CLIENT_VERSION})")
    return GoClient(binary)


@dataclasses.dataclass(frozen=True)
class GoRemotingClient:
    """The compiled go_remoting program: ``command(scenario, ...)`` is its command line."""

    binary: Path

    def command(self, scenario: str, log_dir: Path, **options: object) -> list[str]:
        return [str(self.binary), scenario, "--log-dir", str(log_dir), *_flags(options)]


def go_remoting_client() -> GoRemotingClient:
    """Build (once) and return the program on rocketmq-client-go/v2."""
    folder = SOURCES / "go_remoting"
    home = _build_home(
        "go-remoting",
        GO_REMOTING_CLIENT_VERSION,
        folder / "main.go",
        folder / "go.mod",
        folder / "go.sum",
    )
    binary = home / "official-client-go-remoting"
    go_build(folder, ".", binary, f"the Go client v2 program ({GO_REMOTING_CLIENT_VERSION})")
    return GoRemotingClient(binary)


def go_build(folder: Path, package: str, binary: Path, what: str) -> None:
    """``go build`` ``package`` of the module in ``folder`` into ``binary``, unless it is
    there already; ClientsUnavailable says what is missing."""
    if binary.exists():
        return
    go = _go_binary(what)
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PATH": f"{Path(go).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "GOTOOLCHAIN": "local",
        # Read-only go.sum: the module proxy's archives must match the pinned hashes.
        "GOFLAGS": "-mod=readonly -buildvcs=false -modcacherw",
        "CGO_ENABLED": "0",
    }
    partial = binary.with_suffix(".partial")
    try:
        run_install_step([go, "build", "-o", str(partial), package], what, cwd=folder, env=env)
    except InstallError as exc:
        raise ClientsUnavailable(str(exc)) from None
    partial.rename(binary)


def built_or_skipped(build: Callable[[], T]) -> T:
    """``build()``; a test skips when that cannot be done here, or fails where CI requires
    every client (SKIFF_REQUIRE_K8S)."""
    import pytest

    try:
        return build()
    except ClientsUnavailable as exc:
        if os.environ.get("SKIFF_REQUIRE_K8S"):
            pytest.fail(f"SKIFF_REQUIRE_K8S is set: {exc}")
        pytest.skip(str(exc))


def _flags(options: dict[str, object]) -> list[str]:
    flags = []
    for name, value in options.items():
        if value is not None:
            flags += [f"--{name.replace('_', '-')}", str(value)]
    return flags


@dataclasses.dataclass
class Outcome:
    """What a client program printed, and how it ended."""

    returncode: int
    summary: dict
    stderr: str

    @property
    def errors(self) -> list[str]:
        return self.summary.get("errors", [])


def run_client(command: list[str], log_dir: Path, timeout_s: float = RUN_TIMEOUT_S) -> Outcome:
    """Run a client program and parse the JSON it printed last."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        # The Go client's log folder (it reads these dotted names from the environment).
        "rocketmq.client.logRoot": str(log_dir),
        "user.home": str(log_dir),
        # The Go client v2's broadcasting offsets (read from the environment at start-up).
        "rocketmq.client.localOffsetStoreDir": str(log_dir / "offsets"),
    }
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(
            f"{command[0]} printed no summary (exit {done.returncode}); stderr:\n"
            f"{done.stderr[-3000:]}\nstdout:\n{done.stdout[-2000:]}"
        )
    return Outcome(done.returncode, json.loads(lines[-1]), done.stderr)


# mqadmin: the operations tool's commands (MQAdminStartup), several per JVM.
MQADMIN_VERSION = "5.3.3"


def mqadmin_batch() -> JavaClient:
    """Build (once) and return ``java/MqAdminBatch.java`` on rocketmq-tools."""
    return _java_program(
        "MqAdminBatch",
        [SOURCES / "java" / "MqAdminBatch.java"],
        [MavenArtifact("org.apache.rocketmq", "rocketmq-tools", MQADMIN_VERSION)],
        libs=f"mqadmin-{MQADMIN_VERSION}",
        home="mqadmin",
        version=MQADMIN_VERSION,
        what="mqadmin",
    )


# rocketmq-spring-boot-starter: RocketMQTemplate and @RocketMQMessageListener on the
# remoting client it brings (rocketmq-client 5.3.0 for 2.3.1), in Spring Boot 2.7 without web.
SPRING_STARTER_VERSION = "2.3.1"


def spring_starter_app() -> JavaClient:
    """Build (once) and return ``java/SpringStarterApp.java`` on rocketmq-spring-boot-starter."""
    return _java_program(
        "skiff.spring.SpringStarterApp",
        [SOURCES / "java" / "SpringStarterApp.java"],
        [
            MavenArtifact(
                "org.apache.rocketmq", "rocketmq-spring-boot-starter", SPRING_STARTER_VERSION
            )
        ],
        libs=f"spring-starter-{SPRING_STARTER_VERSION}",
        home="spring-starter",
        version=SPRING_STARTER_VERSION,
        what="the Spring Boot application on rocketmq-spring-boot-starter",
    )


# The 5.x remoting client (rocketmq-client 5.x): its pop calls.
REMOTING_5_CLIENT_VERSION = "5.3.3"


def remoting_pop_java_client() -> JavaClient:
    """Build (once) and return ``java/RemotingPopClient.java`` on rocketmq-client 5.x."""
    return _java_program(
        "RemotingPopClient",
        [SOURCES / "java" / "RemotingPopClient.java"],
        [MavenArtifact("org.apache.rocketmq", "rocketmq-client", REMOTING_5_CLIENT_VERSION)],
        libs=f"java-remoting-{REMOTING_5_CLIENT_VERSION}",
        home="java-remoting-pop",
        version=REMOTING_5_CLIENT_VERSION,
        what="the RocketMQ 5.x remoting client",
    )
