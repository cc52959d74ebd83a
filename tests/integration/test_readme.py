"""The README's and the documentation pages' walkthroughs work as written, against real
brokers (the getting-started page has a test of its own, test_getting_started)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from tests.k8s.cluster_members import pull_all
from tests.support.broker_process import (
    BrokerProcess,
    broker_command,
    broker_env,
    create_topics,
    data_dir_of,
    running_broker,
    start_broker,
)
from tests.support.kube_control_plane import free_port
from tests.support.waiting import wait_for

from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.metadata.topic_table import TopicConfig

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# Documents whose install lines a user copies.
INSTALL_DOCS = (
    README,
    *sorted(DOCS.glob("**/*.md")),
    ROOT / "charts" / "skiff" / "README.md",
    ROOT / "bench" / "README.md",
)
README_ENDPOINT = "127.0.0.1:8081"


def _section(name: str, document: Path = README) -> str:
    """The ``## name`` section of ``document``, up to the next ``##`` heading."""
    text = document.read_text()
    start = text.index(f"## {name}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _page(name: str) -> str:
    return (DOCS / name).read_text()


def _blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def test_set_up_is_two_commands_and_installs_into_a_venv():
    # Debian's system Python refuses `pip install .` outside a venv.
    install_and_run, run_tests = _blocks(_section("Set up"), "sh")
    steps = [step.strip() for step in install_and_run.strip().split("&&")]
    assert steps[0] == "python3 -m venv .venv"
    assert steps[1] == ". .venv/bin/activate"
    assert steps[2:] == ["pip install .", "skiff broker"]
    assert run_tests.strip() == "scripts/test"


def test_the_readme_is_a_front_door_whose_links_lead_somewhere():
    text = README.read_text()
    assert len(text.encode()) <= 10 * 1024
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 10, links
    for link in links:
        assert (ROOT / link).exists(), f"README links to {link}, which is not in the repository"


def _listen_addresses(line: str) -> set[str]:
    """The addresses a ``skiff broker`` line listens on, defaults included."""
    args = shlex.split(line.split("#")[0])
    given = {flag: args[args.index(flag) + 1] for flag in args if flag.endswith("-listen")}
    given.setdefault("--listen", "127.0.0.1:8081")
    given.setdefault("--metrics-listen", "127.0.0.1:5557")
    given.setdefault("--remoting-listen", "127.0.0.1:8080")
    return set(given.values())


def test_the_replication_brokers_take_no_port_of_each_other_or_of_the_first_broker():
    # The getting-started broker (8081, metrics 5557, remoting 8080) may still run beside them.
    first, _ = _blocks(_page("replication.md"), "sh")
    a0, a1 = [_listen_addresses(line) for line in first.splitlines() if "skiff broker" in line]
    taken = {"127.0.0.1:8081", "127.0.0.1:5557", "127.0.0.1:8080"}
    assert not a0 & taken and not a1 & taken and not a0 & a1, (a0, a1)


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _installed_requirements() -> list[tuple[Path, Requirement]]:
    """Every requirement after a ``pip install`` in the documents (paths and options left out)."""
    found = []
    for doc in INSTALL_DOCS:
        for line in re.findall(r"pip install ([^`\n]*)", doc.read_text()):
            for word in shlex.split(line.split("&&")[0]):
                if word.startswith(("-", ".")) or not word[0].isalnum():
                    continue
                found.append((doc, Requirement(word)))
    return found


def test_every_install_line_names_our_distribution_and_its_extras():
    project = _pyproject()["project"]
    assert project["name"] == "skiff-broker"
    ours = [(doc, req) for doc, req in _installed_requirements() if req.name.startswith("skiff")]
    # The Spark and operator extras, at least, are shown.
    assert {extra for _, req in ours for extra in req.extras} >= {"spark", "operator"}
    for doc, req in ours:
        # `skiff` on PyPI is another project: installing it gives theirs.
        assert req.name == "skiff-broker", f"{doc.name}: pip install {req}"
        assert req.extras <= project["optional-dependencies"].keys(), f"{doc.name}: {req}"


def test_pip_resolves_the_documented_name_and_extras_to_this_project(tmp_path):
    """pip reads the name from the project itself (offline: the clone, no index)."""
    extras = sorted(
        {extra for _, req in _installed_requirements() for extra in req.extras}
        & _pyproject()["project"]["optional-dependencies"].keys()
    )
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index"),
            *("--no-build-isolation", "--quiet", "--report", str(report)),
            f"skiff-broker[{','.join(extras)}] @ {ROOT.as_uri()}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (installed,) = json.loads(report.read_text())["install"]
    assert installed["metadata"]["name"] == "skiff-broker"
    assert set(extras) <= set(installed["metadata"]["provides_extra"])
    # The commands keep their names.
    scripts = _pyproject()["project"]["scripts"]
    assert {"skiff", "skiff-operator"} <= scripts.keys()


def test_produce_and_consume_walkthrough(tmp_path):
    section = _section("Produce and consume")
    create_topic, shell = _blocks(section, "sh")
    (snippet,) = _blocks(section, "python")
    with running_broker(tmp_path) as broker:

        def run(command: list[str], **kwargs) -> str:
            done = subprocess.run(
                command, env=broker_env(), capture_output=True, text=True, timeout=120, **kwargs
            )
            assert done.returncode == 0, done.stderr
            return done.stdout

        def skiff(line: str) -> str:
            args = shlex.split(line.replace(README_ENDPOINT, broker.endpoint))
            assert args[0] == "skiff"
            return run(
                [sys.executable, "-m", "skiff_broker", *args[1:], "--endpoint", broker.endpoint]
            )

        assert "created topic demo" in skiff(
            create_topic.strip().replace(" --endpoint 127.0.0.1:8081", "")
        )
        out = run([sys.executable, "-c", snippet.replace(README_ENDPOINT, broker.endpoint)])
        assert re.search(r"^sent 01[0-9A-F]{32}$", out, re.M), out
        assert "received b'hello, skiff' greeting {'order-1'}" in out

        send, consume, lag = [line for line in shell.splitlines() if line.strip()]
        assert "sent" in skiff(send)
        assert "hello from the shell" in skiff(consume)
        # demo-readers acked what it received; only the message sent from the shell
        # after it stopped is left for it.
        assert "total lag of group demo-readers on demo: 1" in skiff(lag)


def test_consumer_groups_walkthrough(tmp_path):
    (block,) = _blocks(_section("Consumer groups", DOCS / "clients.md"), "sh")
    create_topics(data_dir_of(tmp_path), TopicConfig("demo", 4, 4))
    with running_broker(tmp_path) as broker:

        def skiff(words: list[str]) -> subprocess.CompletedProcess[str]:
            assert words[0] == "skiff"
            done = subprocess.run(
                [sys.executable, "-m", "skiff_broker", *words[1:], "--endpoint", broker.endpoint],
                env=broker_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"{words}: {done.stderr}"
            return done

        with MessagingClient(broker.endpoint) as client:
            client.send([OutgoingMessage("demo", b"first"), OutgoingMessage("demo", b"second")])
        skiff(["skiff", "consume", "--topic", "demo", "--group", "demo-readers", "--count", "1"])
        outputs = [
            skiff(_assignments_and_command(line)[1]) for line in block.splitlines() if line.strip()
        ]
    listed, described, preview, by_time, peeked, throwaway, deleted = outputs
    assert re.search(r"^demo-readers\s+demo\s+0\s+1$", listed.stdout, re.M), listed.stdout
    assert "topic demo: lag 1" in described.stdout
    assert "dry run: nothing changed" in preview.stdout
    assert "reset group demo-readers on demo (4 queues)" in by_time.stdout
    assert "peeked at 2 messages of demo; none acknowledged" in peeked.stderr
    assert "consumed 0 messages" in throwaway.stderr and "(throwaway, deleted)" in throwaway.stderr
    assert "deleted group demo-readers (it had offsets on demo)" in deleted.stdout


def _assignments_and_command(line: str) -> tuple[dict[str, str], list[str]]:
    """``A=1 B=2 skiff x`` (a trailing comment dropped) as ({A: 1, B: 2}, [skiff, x])."""
    words = shlex.split(line, comments=True)
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def test_users_and_acls_walkthrough(tmp_path):
    (block,) = _blocks(_page("users-and-acls.md"), "sh")
    start, export, *commands = [line for line in block.splitlines() if line.strip()]
    broker_vars, words = _assignments_and_command(start)
    assert words == ["skiff", "broker"]
    exported = dict(word.partition("=")[::2] for word in shlex.split(export, comments=True)[1:])
    create_topics(data_dir_of(tmp_path), TopicConfig("orders", 2, 2))
    outputs = []
    with running_broker(tmp_path, env=broker_vars) as broker:
        for line in commands:
            env, args = _assignments_and_command(line)
            assert args[0] == "skiff"
            done = subprocess.run(
                [sys.executable, "-m", "skiff_broker", *args[1:], "--endpoint", broker.endpoint],
                env=broker_env({**exported, **env}),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"{line}: {done.stderr}"
            outputs.append(done.stdout)
        # alice may now send to orders with her own keys.
        signed = {"SKIFF_ACCESS_KEY": "alice", "SKIFF_SECRET_KEY": "alice-secret"}
        sent = subprocess.run(
            [
                *(sys.executable, "-m", "skiff_broker", "send", "--topic", "orders"),
                *("--body", "hi", "--endpoint", broker.endpoint),
            ],
            env=broker_env(signed),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert sent.returncode == 0, sent.stderr
    assert "Topic:orders,Group:billing" in outputs[-1] and "Pub,Sub" in outputs[-1]


def test_skiffs_own_clients_snippet(tmp_path):
    (snippet,) = _blocks(
        _section("Skiff's own clients, for throughput", DOCS / "clients.md"), "python"
    )
    with running_broker(tmp_path) as broker:
        created = subprocess.run(
            [
                *(sys.executable, "-m", "skiff_broker", "topic", "create", "demo"),
                *("--read-queues", "4", "--write-queues", "4", "--endpoint", broker.endpoint),
            ],
            env=broker_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert created.returncode == 0, created.stderr
        done = subprocess.run(
            [sys.executable, "-c", snippet.replace(README_ENDPOINT, broker.endpoint)],
            env=broker_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"01[0-9A-F]{32} 10000", lines[0]), lines[0]
    read = lines[1:]
    # Every message comes back once, from the four queues.
    assert len(read) == 10_001
    assert {line.split()[0] for line in read} == {"0", "1", "2", "3"}
    assert sum("b'one'" in line for line in read) == 1
    assert sum("b'many " in line for line in read) == 10_000


# -- the replication walkthrough ---------------------------------------------------

# a0's and a1's client, replication, metrics and remoting ports on the replication page.
PAGE_PORTS = ("8091", "8092", "10921", "10922", "5567", "5568", "8181", "8182")


class Walkthrough:
    """The replication page's commands, run literally on free local ports."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.ports = {port: str(free_port()) for port in PAGE_PORTS}
        first, failover = _blocks(_page("replication.md"), "sh")
        # The page's own command makes the group's secret, here in the test's folder.
        (make_secret,) = (line for line in first.splitlines() if "/dev/urandom" in line)
        subprocess.run(make_secret.split("#")[0], shell=True, cwd=tmp_path, check=True)
        self.starts = [self._args(line) for line in first.splitlines() if "skiff broker" in line]
        self.info = next(self._args(line) for line in first.splitlines() if "admin info" in line)
        self.promote, self.rejoin = (
            self._args(line) for line in failover.splitlines() if line.strip()
        )
        # The one line the old master exits with when started again with its first command.
        (refusal,) = _blocks(_page("replication.md"), "text")
        self.refusal = self._ports(refusal.strip())
        self.running: list[BrokerProcess] = []

    def _ports(self, text: str) -> str:
        for port, mine in self.ports.items():
            text = text.replace(f":{port}", f":{mine}")
        return text

    def _args(self, line: str) -> list[str]:
        args = shlex.split(self._ports(line.split("#")[0]))
        assert args[0] == "skiff"
        return args[1:]

    def _in_test_folder(self, args: list[str]) -> tuple[Path, list[str]]:
        """The broker's home under the test's folder, and its other arguments."""
        assert args[0] == "broker"
        rest = list(args[1:])
        at = rest.index("--data-dir")
        home = self.tmp_path / Path(rest[at + 1]).name
        del rest[at : at + 2]
        secret = rest.index("--ha-secret-file") + 1
        rest[secret] = str(self.tmp_path / rest[secret])
        home.mkdir(exist_ok=True)
        return home, rest

    def broker(self, args: list[str]) -> BrokerProcess:
        """``skiff broker ...`` with its data directory under the test's folder."""
        home, rest = self._in_test_folder(args)
        # The secret comes from the page's file alone, not the launcher's variable.
        broker = start_broker(home, *rest, env={"SKIFF_HA_SECRET": ""})
        self.running.append(broker)
        return broker

    def refused(self, args: list[str]) -> str:
        """``skiff broker ...`` that must exit 1 without serving; its error line."""
        home, rest = self._in_test_folder(args)
        done = subprocess.run(
            broker_command(home, *rest),
            env=broker_env({"SKIFF_HA_SECRET": ""}),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1, done.stderr
        assert "listening on" not in done.stderr
        (error,) = (line for line in done.stderr.splitlines() if line.startswith("Error:"))
        return error

    def skiff(self, args: list[str]) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "skiff_broker", *args],
            env=broker_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def endpoint(self, port: str) -> str:
        return f"127.0.0.1:{self.ports[port]}"

    def send(self, port: str, count: int, prefix: bytes) -> dict[str, bytes]:
        with MessagingClient(self.endpoint(port), timeout=30) as client:
            messages = [OutgoingMessage("demo", prefix + b"-%d" % i) for i in range(count)]
            receipts = list(client.send_each(messages, in_flight=4))
        return {r.message_id: m.body for r, m in zip(receipts, messages, strict=True)}

    def stored(self, port: str) -> dict[str, bytes]:
        return pull_all(self.endpoint(port), "demo", queues=8)

    def a1_follows(self) -> bool:
        info = json.loads(self.skiff([*self.info, "--json"]))
        return any(r["in_sync"] for r in info["replicas"])

    def cleanup(self) -> None:
        for broker in self.running:
            broker.kill()


@pytest.fixture
def walkthrough(tmp_path: Path) -> Iterator[Walkthrough]:
    steps = Walkthrough(tmp_path)
    for name in ("a0", "a1"):
        create_topics(data_dir_of(tmp_path / name), TopicConfig("demo", 8, 8))
    try:
        yield steps
    finally:
        steps.cleanup()


def test_replication_walkthrough_loses_no_acknowledged_message(walkthrough: Walkthrough) -> None:
    steps = walkthrough
    a0 = steps.broker(steps.starts[0])
    steps.broker(steps.starts[1])
    wait_for(steps.a1_follows, "a1 to follow a0")
    first = steps.send("8091", 10, b"first")
    a0.kill()
    assert "is now MASTER" in steps.skiff(steps.promote)
    second = steps.send("8092", 5, b"second")

    # Started again with its first command, the old master refuses with the page's line.
    assert steps.refused(steps.starts[0]) == steps.refusal
    # It rejoins as the page says and copies everything acknowledged.
    steps.broker(steps.rejoin)
    wait_for(lambda: steps.stored("8091").keys() >= (first | second).keys(), "a0 to copy a1's log")
    assert steps.stored("8092") == first | second


def test_restarting_both_with_their_first_commands_keeps_the_promotion(
    walkthrough: Walkthrough,
) -> None:
    steps = walkthrough
    a0 = steps.broker(steps.starts[0])
    a1 = steps.broker(steps.starts[1])
    wait_for(steps.a1_follows, "a1 to follow a0")
    first = steps.send("8091", 10, b"first")
    a0.kill()
    steps.skiff(steps.promote)
    second = steps.send("8092", 5, b"second")

    # kill -9 a1 too, then both come back with the commands they were first started with:
    # a1 stays the master (in a new term), a0 refuses to be a second one.
    a1.kill()
    a1 = steps.broker(steps.starts[1])
    refusal = steps.refused(steps.starts[0])
    assert "was promoted to master of group broker-a at epoch 3" in refusal
    assert refusal.endswith(steps.refusal.rpartition(" with ")[2])
    info = json.loads(
        steps.skiff(["admin", "info", "--endpoint", steps.endpoint("8092"), "--json"])
    )
    assert info["role"] == "MASTER"
    assert any("stays master" in r.get("msg", "") for r in a1.log_lines())
    assert not any("diverged" in r.get("msg", "") for r in a1.log_lines())
    assert steps.stored("8092") == first | second
    steps.broker(steps.rejoin)
    wait_for(lambda: steps.stored("8091").keys() >= (first | second).keys(), "a0 to copy a1's log")
