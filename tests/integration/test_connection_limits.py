"""Connections that never open, idle ones, too many of them, and a broker out of descriptors.

Against real broker processes on loopback, each with the setting under test given as its
SKIFF_* variable (a broker without the setting starts all the same, and shows what it did
before). The hostile connections are raw sockets; the HTTP/2 ones are written frame by
frame, so that what the broker sends (SETTINGS, GOAWAY, the end of a call) and when it
closes can be read in order. A normal client is a gRPC channel calling QueryRoute.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of
from tests.support.broker_process import running_broker as _running_broker
from tests.support.process_stats import ResidentWatch, cpu_seconds
from tests.support.waiting import wait_for

from skiff_broker.frontdoor.http2 import frames as fr
from skiff_broker.frontdoor.http2.hpack import encode_headers
from skiff_broker.metadata.topic_table import TopicConfig

TOPIC = "connection-limits"
FRAME_HEADER = struct.Struct(">I B I")
RECEIVE_PATH = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
READ_TIMEOUT_S = 60.0
READY, IDLE = grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.IDLE
MiB = 1 << 20
# What a connection that never calls may have the broker hold: at most the 64 KiB it may
# send unasked (docs/running-a-broker.md); these send far less. Besides, the broker's
# working set moves by allocator slack and the normal client's calls (as in
# test_request_budgets.py).
PER_CONNECTION = 64 * 1024
SLACK = 32 * MiB


def assert_within_memory(rss: ResidentWatch, connections: int) -> None:
    print(f"{connections} hanging connections: {rss.report()}")
    grown = rss.peak - rss.before
    assert grown <= connections * PER_CONNECTION + SLACK, (
        f"the broker grew by {grown / MiB:.0f} MiB holding {connections} connections"
    )


@contextlib.contextmanager
def running_broker(tmp_path: Path, env: dict[str, str], **kwargs) -> Iterator[BrokerProcess]:  # type: ignore[no-untyped-def]
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 2, 2))
    with _running_broker(tmp_path, env=env, **kwargs) as broker:
        yield broker


def address_of(broker: BrokerProcess) -> tuple[str, int]:
    host, _, port = broker.endpoint.rpartition(":")
    return host, int(port)


def query_route(endpoint: str, timeout: float = 30.0) -> int:
    """A normal client's call on a connection of its own: the v2 status code."""
    with grpc.insecure_channel(endpoint) as channel:
        request = spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC))
        return MessagingServiceStub(channel).QueryRoute(request, timeout=timeout).status.code


def served(endpoint: str) -> bool:
    try:
        return query_route(endpoint, timeout=5.0) == pb.Code.OK
    except grpc.RpcError:
        return False


def trusting_anything() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def client_hello() -> bytes:
    """The first flight of a TLS client: a ClientHello, to send and then say nothing more."""
    context = trusting_anything()
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello[:1] == b"\x16", "a TLS handshake record"
    return hello


def still_open(sockets: list[socket.socket]) -> list[socket.socket]:
    """The non-blocking ``sockets`` the broker has not closed (what it sent is read away)."""
    remaining = []
    for sock in sockets:
        try:
            while sock.recv(65536):
                pass
        except (BlockingIOError, ssl.SSLWantReadError):
            remaining.append(sock)
        except (ConnectionError, ssl.SSLError):
            pass
    return remaining


class RawHttp2:
    """An HTTP/2 client connection written and read frame by frame."""

    def __init__(self, address: tuple[str, int], source: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection(address, source_address=(source, 0))
        self.sock.settimeout(READ_TIMEOUT_S)
        self._buffer = b""

    def open(self) -> None:
        self.sock.sendall(fr.PREFACE + fr.settings({}))

    def close(self) -> None:
        self.sock.close()

    def frame(self) -> tuple[int, int, int, bytes] | None:
        """The next frame (type, flags, stream, payload); None once the broker has closed."""
        while len(self._buffer) < 9 or len(self._buffer) < 9 + (
            FRAME_HEADER.unpack_from(self._buffer)[0] >> 8
        ):
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                return None
            self._buffer += data
        word, flags, stream = FRAME_HEADER.unpack_from(self._buffer)
        end = 9 + (word >> 8)
        payload, self._buffer = self._buffer[9:end], self._buffer[end:]
        return word & 0xFF, flags, stream & fr.STREAM_MASK, payload

    def frames_until_closed(self) -> list[tuple[int, int, int, bytes]]:
        seen = []
        while (frame := self.frame()) is not None:
            seen.append(frame)
        return seen

    def accepted(self) -> bool:
        """Opens; True if the broker answers with its SETTINGS, False if it closes first."""
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.open()
        frame = self.frame()
        return frame is not None and frame[0] == fr.SETTINGS

    def long_poll(self, stream: int, group: str, seconds: int) -> None:
        """A ReceiveMessage call that waits up to ``seconds`` for a message."""
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0),
            filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
            batch_size=1,
            invisible_duration=Duration(seconds=30),
            long_polling_timeout=Duration(seconds=seconds),
        ).SerializeToString()
        block = encode_headers(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", RECEIVE_PATH),
                (":authority", "localhost"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ]
        )
        message = b"\x00" + len(request).to_bytes(4, "big") + request
        self.sock.sendall(
            fr.frame(fr.HEADERS, fr.END_HEADERS, stream, block)
            + fr.frame(fr.DATA, fr.END_STREAM, stream, message)
        )


# -- the preface timeout --------------------------------------------------------------


@pytest.mark.parametrize("tls_mode", ["permissive", "disabled"])
def test_connections_that_never_open_are_closed_after_the_preface_timeout(tmp_path, tls_mode):
    kinds = {
        "one byte": b"P",
        "the preface alone": fr.PREFACE,
        "a ClientHello alone": client_hello(),
        "nothing": b"",
    }
    counts = {"one byte": 100, "the preface alone": 100, "a ClientHello alone": 100, "nothing": 20}
    env = {"SKIFF_PREFACE_TIMEOUT": "2", "SKIFF_TLS_MODE": tls_mode}
    with running_broker(tmp_path, env) as broker, ResidentWatch(broker.proc.pid) as rss:
        address = address_of(broker)
        opened: dict[str, list[socket.socket]] = {kind: [] for kind in kinds}
        try:
            for kind, data in kinds.items():
                for _ in range(counts[kind]):
                    sock = socket.create_connection(address)
                    if data:
                        sock.sendall(data)
                    sock.setblocking(False)
                    opened[kind].append(sock)
            if tls_mode == "permissive":
                # A whole TLS handshake, then no HTTP/2 preface.
                opened["TLS, then nothing"] = []
                for _ in range(20):
                    tls = trusting_anything().wrap_socket(
                        socket.create_connection(address), server_hostname="localhost"
                    )
                    tls.setblocking(False)
                    opened["TLS, then nothing"].append(tls)
            # While they hang, a normal client is served.
            assert query_route(broker.endpoint) == pb.Code.OK

            def left_open() -> dict[str, int]:
                return {kind: len(still_open(socks)) for kind, socks in opened.items()}

            try:
                wait_for(
                    lambda: not any(left_open().values()),
                    "the broker to close every connection that never opened",
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}; still open: {left_open()}") from None
            assert query_route(broker.endpoint) == pb.Code.OK
        finally:
            for socks in opened.values():
                for sock in socks:
                    sock.close()
        rss.settled()
        assert_within_memory(rss, sum(len(socks) for socks in opened.values()))
        lines = [r["msg"] for r in broker.log_lines() if "did not open within 2s" in r["msg"]]
        # Counted, not logged one by one.
        assert 1 <= len(lines) <= 3, lines
        assert "--preface-timeout" in lines[0]


# -- the idle timeout -----------------------------------------------------------------


def test_an_idle_connection_gets_goaway_and_is_closed_while_a_long_poll_keeps_its_own(tmp_path):
    with running_broker(tmp_path, {"SKIFF_IDLE_CONNECTION_TIMEOUT": "2"}) as broker:
        address = address_of(broker)
        polling = RawHttp2(address)
        polling.open()
        # Longer than the idle timeout: the connection has a call open all along.
        polling.long_poll(1, f"g-{uuid.uuid4().hex[:8]}", seconds=5)
        idle = RawHttp2(address)
        idle.open()
        try:
            idle_frames = idle.frames_until_closed()
            goaways = [payload for kind, _, _, payload in idle_frames if kind == fr.GOAWAY]
            assert goaways, f"closed without GOAWAY: {idle_frames}"
            last_stream, code = struct.unpack(">II", goaways[0][:8])
            assert (last_stream, code) == (0, 0), "GOAWAY NO_ERROR, no stream processed"
            assert idle_frames[-1][0] == fr.GOAWAY, "nothing after GOAWAY but the close"

            polling_frames = polling.frames_until_closed()
            kinds = [(kind, flags, stream) for kind, flags, stream, _ in polling_frames]
            call_end = next(
                i
                for i, (kind, flags, stream) in enumerate(kinds)
                if stream == 1 and kind in (fr.HEADERS, fr.DATA) and flags & fr.END_STREAM
            )
            goaway = next(i for i, (kind, _, _) in enumerate(kinds) if kind == fr.GOAWAY)
            # The long poll ran to its end; only then was the connection idle, and told so.
            assert call_end < goaway, kinds
            last_stream, code = struct.unpack(">II", polling_frames[goaway][3][:8])
            assert (last_stream, code) == (1, 0)
        finally:
            idle.close()
            polling.close()
        # A gRPC client whose connection was closed idle connects again for its next call.
        states: list[grpc.ChannelConnectivity] = []
        with grpc.insecure_channel(broker.endpoint) as channel:
            channel.subscribe(states.append)
            stub = MessagingServiceStub(channel)
            route = spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC))
            assert stub.QueryRoute(route, timeout=30).status.code == pb.Code.OK
            wait_for(
                lambda: READY in states and IDLE in states[states.index(READY) :],
                "the channel to see its idle connection closed",
            )
            assert stub.QueryRoute(route, timeout=30).status.code == pb.Code.OK


IDLE_CONNECTIONS = 300


def test_many_idle_connections_are_closed_within_memory_while_a_client_is_served(tmp_path):
    with running_broker(tmp_path, {"SKIFF_IDLE_CONNECTION_TIMEOUT": "2"}) as broker:
        address = address_of(broker)
        with ResidentWatch(broker.proc.pid) as rss:
            idle = [RawHttp2(address) for _ in range(IDLE_CONNECTIONS)]
            try:
                for connection in idle:
                    connection.open()
                # While they idle, and as they are sent away, a normal client is served.
                assert query_route(broker.endpoint) == pb.Code.OK
                for connection in idle:
                    seen = connection.frames_until_closed()
                    assert [kind for kind, *_ in seen][-1:] == [fr.GOAWAY], seen
                assert query_route(broker.endpoint) == pb.Code.OK
            finally:
                for connection in idle:
                    connection.close()
            rss.settled()
        assert_within_memory(rss, IDLE_CONNECTIONS)


# -- connection limits ----------------------------------------------------------------


def test_connections_over_the_limits_are_refused_and_the_others_served(tmp_path):
    env = {"SKIFF_MAX_CONNECTIONS": "12", "SKIFF_MAX_CONNECTIONS_PER_ADDRESS": "5"}
    with running_broker(tmp_path, env) as broker:
        address = address_of(broker)
        held: list[RawHttp2] = []

        def connect(source: str) -> RawHttp2:
            connection = RawHttp2(address, source)
            held.append(connection)
            return connection

        try:
            with grpc.insecure_channel(broker.endpoint) as channel:
                stub = MessagingServiceStub(channel)
                route = spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC))
                # A normal client, from 127.0.0.1: one connection of its own.
                assert stub.QueryRoute(route, timeout=30).status.code == pb.Code.OK
                # Per address: five from 127.0.0.2, and the sixth is closed at once.
                assert all(connect("127.0.0.2").accepted() for _ in range(5))
                assert not connect("127.0.0.2").accepted()
                # In all: the client, five more from 127.0.0.3 and one from 127.0.0.4 make
                # twelve; the next one is refused, from any address.
                assert all(connect("127.0.0.3").accepted() for _ in range(5))
                assert connect("127.0.0.4").accepted()
                assert not connect("127.0.0.4").accepted()
                assert not connect("127.0.0.5").accepted()
                # Connections already open keep being served.
                assert stub.QueryRoute(route, timeout=30).status.code == pb.Code.OK
                # Two of 127.0.0.2's close: their places are free again.
                for connection in held[:2]:
                    connection.close()
                wait_for(
                    lambda: connect("127.0.0.5").accepted(), "a connection once two have closed"
                )
                assert connect("127.0.0.2").accepted()
        finally:
            for connection in held:
                connection.close()
        lines = [r for r in broker.log_lines() if "over the connection limits" in r["msg"]]
        assert 1 <= len(lines) <= 3, lines
        assert "--max-connections-per-address" in lines[0]["msg"]
        # Every place comes back once the broker has seen the connections close.
        wait_for(lambda: query_route(broker.endpoint) == pb.Code.OK, "a call once all closed")


def test_a_connection_gives_its_place_back_however_it_ends(tmp_path):
    """A failed handshake, a preface timeout, a protocol error and a client's close each
    free the connection's place: the address may open as many again."""
    env = {"SKIFF_MAX_CONNECTIONS_PER_ADDRESS": "4", "SKIFF_PREFACE_TIMEOUT": "1"}
    with running_broker(tmp_path, env) as broker:
        address = address_of(broker)
        endings = [
            b"\x16\x03\x01\x00\x05hello",  # a TLS record that is no ClientHello
            client_hello(),  # a handshake never finished
            b"P",  # a preface never finished
            b"GET / HTTP/1.1\r\n\r\n",  # not HTTP/2 at all
        ]
        for _ in range(3):
            socks = []
            for data in endings:
                sock = socket.create_connection(address, source_address=("127.0.0.7", 0))
                sock.sendall(data)
                sock.setblocking(False)
                socks.append(sock)
            try:
                wait_for(lambda: not still_open(socks), "the broker to close all four")  # noqa: B023
            finally:
                for sock in socks:
                    sock.close()
        held: list[RawHttp2] = []

        def connect() -> RawHttp2:
            held.append(RawHttp2(address, "127.0.0.7"))
            return held[-1]

        try:
            # A close is seen a moment after it happens: the first may wait for a place.
            wait_for(lambda: connect().accepted(), "a place for 127.0.0.7 again")
            assert all(connect().accepted() for _ in range(3))
            assert not connect().accepted()
        finally:
            for connection in held:
                connection.close()


# -- out of descriptors ---------------------------------------------------------------

# Starts the broker under a descriptor limit (argv[1]), as `ulimit -n` would.
_LIMITED = (
    "import resource, runpy, sys; "
    "limit = int(sys.argv.pop(1)); "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)); "
    "sys.argv[0] = 'skiff_broker'; "
    "runpy.run_module('skiff_broker', run_name='__main__', alter_sys=True)"
)


def open_descriptors(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def test_out_of_descriptors_the_broker_pauses_accepting_without_spinning(tmp_path):
    limit = 256
    env = {
        # The idle connections stay (they are the point), with only a descriptor limit.
        "SKIFF_PREFACE_TIMEOUT": "600",
        "SKIFF_MAX_CONNECTIONS": "100000",
        "SKIFF_MAX_CONNECTIONS_PER_ADDRESS": "100000",
    }
    launcher = [sys.executable, "-c", _LIMITED, str(limit)]
    with running_broker(tmp_path, env, launcher=launcher) as broker:
        pid = broker.proc.pid
        address = address_of(broker)
        assert open_descriptors(pid) < limit - 50, "room for some connections"
        idle: list[socket.socket] = []
        try:
            for _ in range(limit + 100):
                idle.append(socket.create_connection(address))
            wait_for(
                lambda: open_descriptors(pid) >= limit - 8, "the broker to run out of descriptors"
            )
            lines_before = len(broker.log_lines())
            cpu_before, wall_before = cpu_seconds(pid), time.monotonic()
            time.sleep(5)
            cpu_used, wall = cpu_seconds(pid) - cpu_before, time.monotonic() - wall_before
            # The store's own threads may say they lack descriptors too: only the lines
            # about accepting count here.
            new_lines = [r for r in broker.log_lines()[lines_before:] if "accept" in r["msg"]]
            print(
                f"while out of descriptors: {cpu_used:.2f}s CPU in {wall:.1f}s, "
                f"{len(new_lines)} log lines about accepting"
            )
            assert len(new_lines) <= 2, new_lines[:5]
            assert cpu_used < 0.2 * wall, f"{cpu_used:.2f}s of CPU in {wall:.1f}s"
        finally:
            for sock in idle:
                sock.close()
        wait_for(lambda: served(broker.endpoint), "a normal client served again")
        lines = [r["msg"] for r in broker.log_lines() if "out of resources accepting" in r["msg"]]
        print(lines)
        assert "ulimit -n" in lines[0]
