"""Only the group's own peers replicate (real broker processes, hand-driven peers on loopback).

A stranger at a master's replication port gets no log byte and is not listed;
a peer with the secret that acknowledges bytes it was never sent is dropped and
no SYNC write is acknowledged on its word; a master that cannot prove the
secret makes a replica write nothing, while the same bytes from one that can
are written. A broker that replicates without a secret does not start, and a
plain master opens no replication port at all.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.broker_process import (
    COMMIT_LOG_FILE_SIZE,
    HA_SECRET,
    SKIFF,
    SMALL_FILES_ENV,
    BrokerProcess,
    broker_env,
    create_topics,
    data_dir_of,
    killed_afterwards,
    start_broker,
)
from tests.support.waiting import wait_for

from skiff_broker.client.admin import AdminClient, BrokerInfo
from skiff_broker.client.errors import MessagingError
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.ha import framing
from skiff_broker.ha.framing import FrameType
from skiff_broker.ha.peer_auth import NONCE_BYTES, PROOF_BYTES, new_nonce, proof
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore

TOPIC = "guarded"
GROUP = "broker-a"  # the brokers' default --broker-name
SEGMENT_BYTES = 8 * 1024 * 1024
assert COMMIT_LOG_FILE_SIZE == "8m"
DEADLINE_S = 60.0
HEARTBEATS = ("--ha-heartbeat-interval", "0.5", "--ha-heartbeat-timeout", "5")


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    with killed_afterwards() as started:
        yield started


def info(broker: BrokerProcess) -> BrokerInfo:
    with AdminClient(broker.endpoint) as admin:
        return admin.broker_info()


def start_master(tmp_path: Path, brokers: list[BrokerProcess], *args: str) -> BrokerProcess:
    create_topics(data_dir_of(tmp_path / "master"), TopicConfig(TOPIC, 1, 1))
    master = start_broker(tmp_path / "master", "--role", "MASTER", *HEARTBEATS, *args)
    brokers.append(master)
    return master


def send(broker: BrokerProcess, count: int) -> None:
    with MessagingClient(broker.endpoint) as client:
        client.send([OutgoingMessage(TOPIC, b"m-%d" % i) for i in range(count)])


def connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the peer sends until it closes the connection."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    header = sock.recv(framing.HEADER.size, socket.MSG_WAITALL)
    assert len(header) == framing.HEADER.size, f"connection closed: {header!r}"
    frame_type, length = framing.HEADER.unpack(header)
    payload = sock.recv(length, socket.MSG_WAITALL) if length else b""
    assert len(payload) == length
    return frame_type, payload


def authenticate_as_replica(sock: socket.socket, secret: bytes) -> None:
    """The replica's side of the handshake, done by hand (it sends its proof unchecked)."""
    replica_nonce = new_nonce()
    sock.sendall(framing.encode(FrameType.AUTH_HELLO, replica_nonce))
    frame_type, payload = read_frame(sock)
    assert frame_type == FrameType.AUTH_CHALLENGE
    master_nonce = payload[:NONCE_BYTES]
    answer = proof(secret, "replica", GROUP, replica_nonce, master_nonce)
    sock.sendall(framing.encode(FrameType.AUTH_PROOF, answer))


def hello() -> bytes:
    return framing.encode_json(
        FrameType.HELLO,
        {"replica": "intruder", "max_offset": 0, "epochs": [], "file_size": SEGMENT_BYTES},
    )


def test_a_peer_without_the_secret_gets_no_log_byte_and_is_not_listed(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    master = start_master(tmp_path, brokers)
    send(master, 5)
    assert info(master).commit_log_max_offset > 0

    # The handshake of an unauthenticated replica: the master closes without a word.
    with connect(master.ha_endpoint) as sock:
        sock.sendall(hello())
        assert read_to_end(sock) == b""

    # A proof made with another secret: the master's challenge, then nothing.
    with connect(master.ha_endpoint) as sock:
        authenticate_as_replica(sock, b"not-the-group-secret-at-all")
        sock.sendall(hello())
        assert read_to_end(sock) == b""

    assert info(master).replicas == ()
    wait_for(lambda: "did not authenticate" in master.log(), "the refusals in the master's log")
    refusals = [r["msg"] for r in master.log_lines() if "did not authenticate" in r.get("msg", "")]
    assert all("from 127.0.0.1:" in line for line in refusals)
    assert all("--ha-secret-file" in line for line in refusals)


def test_a_peer_acknowledging_past_what_it_was_sent_is_dropped_and_counts_for_nothing(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    master = start_master(
        tmp_path, brokers, "--replication-mode", "SYNC", "--sync-replication-timeout", "1"
    )
    with connect(master.ha_endpoint) as sock:
        authenticate_as_replica(sock, HA_SECRET.encode())
        sock.sendall(hello())
        frame_type, welcome = read_frame(sock)
        assert frame_type == FrameType.WELCOME, welcome
        assert json.loads(welcome)["start_offset"] == 0
        (listed,) = info(master).replicas
        assert (listed.name, listed.connected) == ("intruder", True)

        # It holds nothing, yet claims a terabyte.
        sock.sendall(framing.encode_offset(FrameType.ACK, 2**40))
        read_to_end(sock)  # the master hangs up (whatever it had sent before)

    (dropped,) = info(master).replicas
    assert not dropped.connected and not dropped.in_sync
    assert dropped.acked_offset == 0
    assert "acknowledged offset 1099511627776" in master.log()
    # A SYNC write still needs a replica that holds it.
    with (
        MessagingClient(master.endpoint, timeout=30) as client,
        pytest.raises(MessagingError) as refused,
    ):
        client.send([OutgoingMessage(TOPIC, b"not replicated")])
    assert refused.value.code == "SLAVE_PERSISTENCE_TIMEOUT"


def valid_log(data_dir: Path) -> bytes:
    """The commit log bytes of a few real records, written by the store into ``data_dir``."""
    entries = int(SMALL_FILES_ENV["SKIFF_INDEX_FILE_ENTRIES"])
    store = MessageStore(
        StoreConfig(
            data_dir=str(data_dir),
            commit_log_file_size=SEGMENT_BYTES,
            consume_queue_units_per_file=int(SMALL_FILES_ENV["SKIFF_CONSUME_QUEUE_FILE_ENTRIES"]),
            max_index_num=entries,
            max_hash_slot_num=entries // 4,
        )
    )
    store.start()
    result = store.put_messages([Message(TOPIC, b"planted-%d" % i, 0, {}) for i in range(10)])
    assert result.ok, result.reason
    end = store.commit_log.max_offset
    store.shutdown()
    return (data_dir / "commitlog" / f"{0:020d}").read_bytes()[:end]


@contextlib.contextmanager
def fake_master(secret: bytes, log: bytes) -> Iterator[str]:
    """A master that proves ``secret`` and, without waiting for HELLO, pushes ``log``."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve_one(sock: socket.socket) -> None:
        with sock:
            frame_type, replica_nonce = read_frame(sock)
            assert frame_type == FrameType.AUTH_HELLO
            master_nonce = new_nonce()
            challenge = master_nonce + proof(secret, "master", GROUP, replica_nonce, master_nonce)
            assert len(challenge) == NONCE_BYTES + PROOF_BYTES
            welcome = {"start_offset": 0, "master_offset": len(log), "epochs": []}
            # Pipelined: a replica that waited for nothing would take all of it.
            sock.sendall(
                framing.encode(FrameType.AUTH_CHALLENGE, challenge)
                + framing.encode_json(FrameType.WELCOME, {**welcome, "file_size": SEGMENT_BYTES})
                + framing.data_header(len(log), 0, len(log))
                + log
            )
            with contextlib.suppress(OSError):
                while not stop.is_set() and sock.recv(65536):
                    pass

    def serve() -> None:
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            sock.settimeout(1.0)
            threading.Thread(target=serve_one, args=(sock,), daemon=True).start()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        server.join()
        listener.close()


@pytest.mark.parametrize("knows_the_secret", [False, True])
def test_a_master_must_prove_the_secret_before_a_replica_writes_its_bytes(
    tmp_path: Path, brokers: list[BrokerProcess], knows_the_secret: bool
) -> None:
    log = valid_log(tmp_path / "source")
    (tmp_path / "replica").mkdir()
    secret = HA_SECRET.encode() if knows_the_secret else b"a-guess-at-the-group-secret"
    with fake_master(secret, log) as address:
        replica = start_broker(
            tmp_path / "replica", "--role", "REPLICA", "--master-address", address, *HEARTBEATS
        )
        brokers.append(replica)
        if knows_the_secret:
            # The control: the very same bytes are written when the master proves the secret.
            wait_for(lambda: info(replica).commit_log_max_offset == len(log), "the copy")
        else:
            wait_for(lambda: "did not authenticate" in replica.log(), "the refusal")
            assert info(replica).commit_log_max_offset == 0
            assert address in replica.log()


def test_replication_without_a_secret_is_refused_at_start_with_how_to_make_one(
    tmp_path: Path,
) -> None:
    env = broker_env()
    del env["SKIFF_HA_SECRET"]
    result = subprocess.run(
        [
            *SKIFF,
            "broker",
            "--data-dir",
            str(tmp_path),
            "--listen",
            "127.0.0.1:0",
            "--role",
            "REPLICA",
            "--master-address",
            "127.0.0.1:1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "head -c 32 /dev/urandom | base64 > ha.secret" in result.stderr
    assert "--ha-secret-file" in result.stderr


def test_a_secret_file_is_read_and_a_plain_master_opens_no_replication_port(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    env = {"SKIFF_HA_SECRET": ""}
    (tmp_path / "plain").mkdir()
    plain = start_broker(tmp_path / "plain", env=env, ha_listen=None)
    brokers.append(plain)
    assert plain.ha_endpoint == ""
    assert info(plain).ha_address == ""
    plain.stop()

    secret_file = tmp_path / "ha.secret"
    secret_file.write_text(HA_SECRET + "\n")
    master = start_master(tmp_path, brokers, "--ha-secret-file", str(secret_file))
    (tmp_path / "replica").mkdir()
    replica = start_broker(
        tmp_path / "replica",
        "--role",
        "REPLICA",
        "--master-address",
        master.ha_endpoint,
        "--ha-secret-file",
        str(secret_file),
        *HEARTBEATS,
        env=env,
    )
    brokers.append(replica)
    send(master, 3)
    end = info(master).commit_log_max_offset
    wait_for(lambda: info(replica).commit_log_max_offset == end, "the replica to copy the log")
