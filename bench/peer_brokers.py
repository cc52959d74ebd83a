"""The broker processes of the peer benchmark: start on loopback, measure, stop, clean up.

Each system runs with its data in a fresh directory on the disk of ``--data-dir``
and one durability setting; ``DURABILITY`` states it next to the figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import peer_install

ROOT = Path(__file__).resolve().parent.parent
START_DEADLINE_S = 120.0
STOP_DEADLINE_S = 30.0
QUEUES = 8  # queues, partitions: the same for every system
TOPICS = (
    "bench",
    "backlog-1k",
    "backlog-100",
    "e2e",
    "e2e-official",
    "java",
    "java-push",
    "remoting",
    "remoting-warmup",
)
# FIFO topics of one queue, and the consumer groups that consume them in order (RocketMQ
# pops in order only for a group configured consumeMessageOrderly); Skiff and RocketMQ only.
FIFO_TOPICS = ("fifo-batch", "fifo-longer")
ORDERLY_GROUPS = ("fifo-peer",)
JVM_HEAP = "1g"

ASYNC = "async"
SYNC = "sync"

# What each system does with a write before it acknowledges it, per durability level.
DURABILITY = {
    (
        "skiff",
        ASYNC,
    ): "ASYNC_FLUSH: ack after the write to the mapped commit log; flushed every 500 ms",
    ("skiff", SYNC): "SYNC_FLUSH: ack after fdatasync (group commit)",
    (
        "rocketmq",
        ASYNC,
    ): "flushDiskType=ASYNC_FLUSH: ack after the write to the page cache; flushed every 500 ms",
    ("rocketmq", SYNC): "flushDiskType=SYNC_FLUSH: ack after the flush (group commit)",
    ("redis", ASYNC): "appendonly yes, appendfsync everysec",
    ("redis", SYNC): "appendonly yes, appendfsync always",
    ("nats", ASYNC): "JetStream file store, sync_interval 2m (server default)",
    ("nats", SYNC): "JetStream file store, sync_interval always",
    ("kafka", ASYNC): "KRaft, acks=all, no fsync (page cache; server default)",
    ("kafka", SYNC): "KRaft, acks=all, log.flush.interval.messages=1 (fsync each append)",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the process exited with {proc.returncode}:\n{tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"port {port} did not open in time:\n{tail(log)}")


def tail(path: Path, size: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return ""


class ProcessStats:
    """CPU seconds and peak RSS of processes from /proc (VmHWM is the kernel's own peak)."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self._tick = os.sysconf("SC_CLK_TCK")

    def cpu_seconds(self) -> float:
        total = 0.0
        for pid in self.pids:
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
                total += (int(fields[11]) + int(fields[12])) / self._tick
        return total

    def peak_rss_mib(self) -> float:
        total = 0.0
        for pid in self.pids:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1]) / 1024
        return total


class Broker:
    """One system at one durability level, running until stop()."""

    system = ""
    version = ""

    def __init__(self, root: str, durability: str) -> None:
        self.durability = durability
        self.data_dir = Path(tempfile.mkdtemp(prefix=f"{self.system}-{durability}-", dir=root))
        self.procs: list[subprocess.Popen] = []
        self.log = self.data_dir / "broker.log"
        self.endpoint = ""
        # The name-server address a RocketMQ 4.x (remoting) client is given ("": none).
        self.namesrv_endpoint = ""

    @property
    def settings(self) -> str:
        return DURABILITY[(self.system, self.durability)]

    def _spawn(
        self, command: list[str], log_name: str = "broker.log", **kwargs
    ) -> subprocess.Popen:
        log = open(self.data_dir / log_name, "ab")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            **kwargs,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        raise NotImplementedError

    def stats(self) -> ProcessStats:
        return ProcessStats([p.pid for p in self.procs])

    def idle(self, limit: float) -> None:
        """Wait (up to ``limit`` s) until the broker uses under 5% of a core."""
        stats = self.stats()
        end = time.monotonic() + limit
        while time.monotonic() < end:
            before = stats.cpu_seconds()
            time.sleep(0.5)
            if stats.cpu_seconds() - before < 0.025:
                return

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_DEADLINE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


class SkiffBroker(Broker):
    system = "skiff"

    def start(self) -> None:
        sys.path.insert(0, str(ROOT / "broker"))
        from skiff_broker import __version__
        from skiff_broker.metadata.topic_table import MessageType, TopicConfig, TopicTable

        self.version = __version__
        store = self.data_dir / "store"
        table = TopicTable(str(store / "config" / "topics.json"))
        table.load()
        for name in TOPICS:
            table.put(TopicConfig(name, QUEUES, QUEUES))
        for name in FIFO_TOPICS:
            table.put(TopicConfig(name, 1, 1, message_type=MessageType.FIFO))
        port, remoting_port = free_port(), free_port()
        # Not the remoting port's default (8080): it may be taken on a shared machine.
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT / "broker"),
            "SKIFF_REMOTING_LISTEN": f"127.0.0.1:{remoting_port}",
        }
        flush = "SYNC_FLUSH" if self.durability == SYNC else "ASYNC_FLUSH"
        proc = self._spawn(
            [
                sys.executable,
                "-m",
                "skiff_broker",
                "broker",
                "--data-dir",
                str(store),
                "--listen",
                f"127.0.0.1:{port}",
                "--flush-type",
                flush,
                # Not the fixed default port: other brokers on the machine may hold it.
                "--metrics-listen",
                f"127.0.0.1:{free_port()}",
                # No --ha-listen: a broker without replicas opens no replication port.
            ],
            env=env,
        )
        deadline = time.monotonic() + START_DEADLINE_S
        wait_for_port(port, proc, self.log, deadline)
        wait_for_port(remoting_port, proc, self.log, deadline)
        self.endpoint = f"127.0.0.1:{port}"
        # Every Skiff broker answers name-server requests on its remoting port.
        self.namesrv_endpoint = f"127.0.0.1:{remoting_port}"


class RocketMQBroker(Broker):
    """A name server and a proxy in local mode (the broker runs inside the proxy's JVM).

    ``topics`` (default ``TOPICS``, of no declared type) maps each topic to its message
    type (NORMAL, FIFO; None: not declared, which takes any message); ``settings`` are more
    ``broker.conf`` lines (``enablePropertyFilter=true``).
    """

    system = "rocketmq"
    version = peer_install.ROCKETMQ_VERSION

    def __init__(
        self,
        root: str,
        durability: str,
        *,
        topics: dict[str, str | None] | None = None,
        settings: tuple[str, ...] = (),
    ) -> None:
        super().__init__(root, durability)
        self.topics = topics if topics is not None else dict.fromkeys(TOPICS)
        self.broker_settings = settings

    def start(self) -> None:
        lib = peer_install.ensure_rocketmq()
        java = peer_install.java_binary()
        store = self.data_dir / "store"
        (store / "config").mkdir(parents=True)

        # Topics exist before the start, as Skiff's do: the broker loads its topic table.
        def topic(name: str, queues: int, kind: str | None) -> dict:
            return {
                "topicName": name,
                "readQueueNums": queues,
                "writeQueueNums": queues,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": False,
                "attributes": {} if kind is None else {"message.type": kind},
            }

        table = {name: topic(name, QUEUES, kind) for name, kind in self.topics.items()}
        # Built on their own, not from another entry: a caller's topics need not hold TOPICS.
        table.update({name: topic(name, 1, "FIFO") for name in FIFO_TOPICS})
        (store / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": table}))
        groups = {
            name: {
                "groupName": name,
                "consumeEnable": True,
                "consumeFromMinEnable": True,
                "consumeBroadcastEnable": True,
                "consumeMessageOrderly": True,
                "retryQueueNums": 1,
                "retryMaxTimes": 16,
                "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": True,
            }
            for name in ORDERLY_GROUPS
        }
        (store / "config" / "subscriptionGroup.json").write_text(
            json.dumps({"subscriptionGroupTable": groups})
        )
        namesrv_port, broker_port, grpc_port, remoting_port = (free_port() for _ in range(4))
        (self.data_dir / "namesrv.conf").write_text(f"listenPort={namesrv_port}\n")
        flush = "SYNC_FLUSH" if self.durability == SYNC else "ASYNC_FLUSH"
        (self.data_dir / "broker.conf").write_text(
            "\n".join(
                [
                    "brokerClusterName=DefaultCluster",
                    "brokerName=bench-broker-a",  # not a topic name: RocketMQ reserves it
                    "brokerId=0",
                    "brokerIP1=127.0.0.1",
                    f"listenPort={broker_port}",
                    f"namesrvAddr=127.0.0.1:{namesrv_port}",
                    f"storePathRootDir={store}",
                    f"storePathCommitLog={store / 'commitlog'}",
                    f"flushDiskType={flush}",
                    "autoCreateTopicEnable=false",
                    *self.broker_settings,
                ]
            )
            + "\n"
        )
        (self.data_dir / "proxy.json").write_text(
            json.dumps(
                {
                    "rocketMQClusterName": "DefaultCluster",
                    "proxyMode": "LOCAL",
                    "namesrvAddr": f"127.0.0.1:{namesrv_port}",
                    "grpcServerPort": grpc_port,
                    "remotingListenPort": remoting_port,
                }
            )
        )
        classpath = f"{lib}/*"
        # Logs go under the data directory (RocketMQ writes them to ~/logs).
        jvm = [java, f"-Duser.home={self.data_dir}", "-cp", classpath]
        env = {**os.environ, "ROCKETMQ_HOME": str(self.data_dir)}
        namesrv = self._spawn(
            [
                *jvm[:1],
                "-Xms256m",
                "-Xmx256m",
                *jvm[1:],
                "org.apache.rocketmq.namesrv.NamesrvStartup",
                "-c",
                str(self.data_dir / "namesrv.conf"),
            ],
            "namesrv.log",
            env=env,
            cwd=self.data_dir,
        )
        deadline = time.monotonic() + START_DEADLINE_S
        wait_for_port(namesrv_port, namesrv, self.data_dir / "namesrv.log", deadline)
        proxy = self._spawn(
            [
                *jvm[:1],
                f"-Xms{JVM_HEAP}",
                f"-Xmx{JVM_HEAP}",
                "-XX:MaxDirectMemorySize=1g",
                *jvm[1:],
                "org.apache.rocketmq.proxy.ProxyStartup",
                "-pm",
                "local",
                "-bc",
                str(self.data_dir / "broker.conf"),
                "-pc",
                str(self.data_dir / "proxy.json"),
            ],
            env=env,
            cwd=self.data_dir,
        )
        wait_for_port(grpc_port, proxy, self.log, deadline)
        self.endpoint = f"127.0.0.1:{grpc_port}"
        # 4.x clients given the name server reach the broker's own port, not the proxy's.
        self.namesrv_endpoint = f"127.0.0.1:{namesrv_port}"
        self._wait_for_routes(deadline)

    def _wait_for_routes(self, deadline: float) -> None:
        """The proxy serves before the broker has registered its topics with the name server."""
        import grpc
        from rocketmq.grpc_protocol import definition_pb2 as pb
        from rocketmq.grpc_protocol import service_pb2 as spb
        from rocketmq.grpc_protocol import service_pb2_grpc

        host, _, port = self.endpoint.rpartition(":")
        request = spb.QueryRouteRequest(
            topic=pb.Resource(name=next(iter(self.topics))),
            endpoints=pb.Endpoints(
                scheme=pb.AddressScheme.IPv4, addresses=[pb.Address(host=host, port=int(port))]
            ),
        )
        with grpc.insecure_channel(self.endpoint) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            while time.monotonic() < deadline:
                with contextlib.suppress(grpc.RpcError):
                    response = stub.QueryRoute(
                        request,
                        timeout=5,
                        metadata=(("x-mq-client-id", "skiff-peers-bench"), ("x-mq-protocol", "v2")),
                    )
                    if response.status.code == pb.Code.OK and response.message_queues:
                        return
                time.sleep(0.5)
        first = next(iter(self.topics))
        raise RuntimeError(f"the proxy never served a route for {first!r}:\n{tail(self.log)}")


class RedisBroker(Broker):
    system = "redis"

    def start(self) -> None:
        binary = peer_install.ensure_redis()
        self.version = peer_install.redis_version(binary)
        port = free_port()
        fsync = "always" if self.durability == SYNC else "everysec"
        proc = self._spawn(
            [
                str(binary),
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--dir",
                str(self.data_dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                fsync,
                "--save",
                "",
                "--daemonize",
                "no",
            ]
        )
        wait_for_port(port, proc, self.log, time.monotonic() + START_DEADLINE_S)
        self.endpoint = f"127.0.0.1:{port}"


class NatsBroker(Broker):
    system = "nats"
    version = peer_install.NATS_VERSION

    def start(self) -> None:
        binary = peer_install.ensure_nats()
        port = free_port()
        sync = "\n  sync_interval: always" if self.durability == SYNC else ""
        config = self.data_dir / "nats.conf"
        config.write_text(
            f"listen: 127.0.0.1:{port}\n"
            "max_payload: 8MB\n"
            f"jetstream {{\n  store_dir: {json.dumps(str(self.data_dir / 'js'))}\n"
            f"  max_file_store: 64GB\n  max_memory_store: 1GB{sync}\n}}\n"
        )
        proc = self._spawn([str(binary), "-c", str(config)])
        wait_for_port(port, proc, self.log, time.monotonic() + START_DEADLINE_S)
        self.endpoint = f"nats://127.0.0.1:{port}"


class KafkaBroker(Broker):
    """One KRaft node that is both controller and broker."""

    system = "kafka"
    version = peer_install.KAFKA_VERSION

    def start(self) -> None:
        lib = peer_install.ensure_kafka()
        java = peer_install.java_binary()
        port, controller_port = free_port(), free_port()
        flush = ["log.flush.interval.messages=1"] if self.durability == SYNC else []
        config = self.data_dir / "server.properties"
        config.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
                    f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                    "controller.listener.names=CONTROLLER",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "inter.broker.listener.name=PLAINTEXT",
                    f"log.dirs={self.data_dir / 'log'}",
                    f"num.partitions={QUEUES}",
                    "offsets.topic.replication.factor=1",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "message.max.bytes=8388608",
                    *flush,
                ]
            )
            + "\n"
        )
        (self.data_dir / "log4j2.properties").write_text(
            "rootLogger.level=WARN\nrootLogger.appenderRef.out.ref=out\n"
            "appender.out.type=Console\nappender.out.name=out\n"
            "appender.out.layout.type=PatternLayout\nappender.out.layout.pattern=%d %p %c %m%n\n"
        )
        base = [
            java,
            f"-Xms{JVM_HEAP}",
            f"-Xmx{JVM_HEAP}",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp",
            f"{lib}/*",
        ]
        cluster_id = uuid.uuid4().bytes
        import base64

        cluster = base64.urlsafe_b64encode(cluster_id).decode().rstrip("=")
        formatted = subprocess.run(
            [*base, "kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(config)],
            capture_output=True,
            text=True,
        )
        if formatted.returncode != 0:
            raise RuntimeError(
                f"kafka storage format failed:\n{formatted.stdout}{formatted.stderr}"
            )
        proc = self._spawn([*base, "kafka.Kafka", str(config)], cwd=self.data_dir)
        wait_for_port(port, proc, self.log, time.monotonic() + START_DEADLINE_S)
        self.endpoint = f"127.0.0.1:{port}"
        self._create_topics()

    def _create_topics(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.endpoint})
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=QUEUES, replication_factor=1) for name in TOPICS],
            operation_timeout=60,
        )
        for future in futures.values():
            future.result(timeout=90)


SYSTEMS: dict[str, type[Broker]] = {
    "skiff": SkiffBroker,
    "rocketmq": RocketMQBroker,
    "redis": RedisBroker,
    "nats": NatsBroker,
    "kafka": KafkaBroker,
}


def refuse_tmpfs(path: str) -> None:
    with open("/proc/mounts") as f:
        mounts = [line.split() for line in f]
    best = ""
    kind = ""
    real = os.path.realpath(path)
    for mount in mounts:
        point = mount[1]
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, mount[2]
    if kind in ("tmpfs", "ramfs"):
        raise SystemExit(f"{path} is on {kind}: give --data-dir a directory on a real disk")
