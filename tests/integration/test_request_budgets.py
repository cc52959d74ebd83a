"""A broker under clients that make it hold request data or decode headers for nothing.

Unfinished messages: 80 streams (8 connections of 10) each announce a 16 MiB message and
send 4 MiB of it, as fast as the broker's windows let them, and never finish. The broker's
resident memory, sampled from ``/proc/<pid>/status`` during the attack and after it, must
stay within the request buffer budget it is given (``--request-buffer-total``, here 64 MiB,
half the default), an admin client must be served throughout, and every stalled stream must be
ended once ``--request-message-timeout`` has passed (DEADLINE_EXCEEDED, then RST_STREAM).
Without the budgets the broker held all 320 MiB, and kept it.

HPACK bomb: header blocks of 16,000 references to one table entry, sent as fast as one
connection can, while a RocketMQ QueryRoute and an admin ListTopics, each with its usual
deadline, must keep succeeding, and each flooding connection must be closed, its GOAWAY
naming the header-list limit.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of, running_broker
from tests.support.process_stats import ResidentWatch, resident_bytes
from tests.support.raw_http2 import (
    DEADLINE_EXCEEDED,
    RawClient,
    grpc_request_headers,
    message_prefix,
)

from skiff_broker.client.admin import AdminClient
from skiff_broker.frontdoor.http2 import frames as fr
from skiff_broker.frontdoor.http2.frames import ErrorCode
from skiff_broker.frontdoor.http2.hpack import encode_headers
from skiff_broker.metadata.topic_table import TopicConfig

MiB = 1 << 20
TOPIC = "budget-orders"
SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"
CONNECTIONS = 8
STREAMS_PER_CONNECTION = 10
ANNOUNCED = 16 * MiB
SENT_PER_STREAM = 4 * MiB
# --request-buffer-total for the test: well under what the attack would have it hold.
REQUEST_BUFFER_TOTAL = 64 * MiB
# Short, so that the test sees the stalled streams ended.
MESSAGE_TIMEOUT_S = 8
# What the broker's own working set may move by besides the held requests (allocator
# slack, read buffers of the attacking connections, the admin client's calls).
SLACK = 32 * MiB
# A bound on the work of the attack loop, not on time.
MAX_ROUNDS = 2_000
IDLE_ROUNDS = 40  # rounds in a row with nothing sent: flow control holds every stream


def test_unfinished_messages_stay_within_the_request_buffer_budget(tmp_path: Path) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 1, 1))
    options = (
        *("--request-message-timeout", str(MESSAGE_TIMEOUT_S)),
        *("--request-buffer-total", str(REQUEST_BUFFER_TOTAL)),
    )
    with running_broker(tmp_path, *options) as broker, AdminClient(broker.endpoint) as admin:
        pid = broker.proc.pid
        assert [t.name for t in admin.list_topics()] == [TOPIC]
        baseline = resident_bytes(pid)
        # Sampled all along as well as in each round: the peak between two rounds counts.
        with ResidentWatch(pid) as rss:
            clients = [RawClient(broker.endpoint) for _ in range(CONNECTIONS)]
            streams = [
                (c, c.open_call(SEND)) for c in clients for _ in range(STREAMS_PER_CONNECTION)
            ]
            payload = message_prefix(ANNOUNCED) + b"\x00" * SENT_PER_STREAM
            sent = {key: 0 for key in streams}
            served = 0
            idle = 0
            for _ in range(MAX_ROUNDS):
                progress = 0
                for client, stream_id in streams:
                    pushed = client.push(stream_id, payload[sent[client, stream_id] :])
                    sent[client, stream_id] += pushed
                    progress += pushed
                for client in clients:
                    client.read_for(0.01)
                rss.sample()
                # A normal client is served while the attack goes on.
                assert [t.name for t in admin.list_topics()] == [TOPIC]
                served += 1
                idle = 0 if progress else idle + 1
                if idle >= IDLE_ROUNDS or all(n == len(payload) for n in sent.values()):
                    break
            held_back = sum(1 for n in sent.values() if n < len(payload))
            total_sent = sum(sent.values())
            print(
                f"RSS baseline {baseline / MiB:.0f} MiB, "
                f"peak {rss.peak / MiB:.0f} MiB during the attack; "
                f"{total_sent / MiB:.0f} MiB sent, {held_back} of {len(streams)} streams held back"
            )
            assert rss.peak - baseline <= REQUEST_BUFFER_TOTAL + SLACK, (
                f"the broker grew by {(rss.peak - baseline) / MiB:.0f} MiB "
                "holding unfinished requests"
            )
            assert held_back, "every stream sent all it wanted: nothing held the attack back"

            # The stalled streams are ended once the time limit has passed, those that could
            # not send a single octet of their message included.
            for client in clients:
                client.read_until(
                    lambda c=client: all(seen.reset is not None for seen in c.streams.values()),
                    deadline_s=MESSAGE_TIMEOUT_S * 4,
                )
                assert [t.name for t in admin.list_topics()] == [TOPIC]
                served += 1
                rss.sample()
            statuses = {c.streams[s].header("grpc-status") for c, s in streams}
            resets = {c.streams[s].reset for c, s in streams}
            assert statuses == {str(DEADLINE_EXCEEDED)}, statuses
            assert resets == {ErrorCode.NO_ERROR}, resets
            message = clients[0].streams[1].header("grpc-message") or ""
            assert "did not arrive in full" in message and "--request-message-timeout" in message
        after = rss.settled()
        print(
            f"RSS {after / MiB:.0f} MiB after the streams were ended; {served} admin calls served"
            f"; sampled throughout: {rss.report()}"
        )
        assert rss.peak - baseline <= REQUEST_BUFFER_TOTAL + SLACK, rss.report()
        assert after - baseline <= REQUEST_BUFFER_TOTAL + SLACK
        for client in clients:
            client.close()
        assert_no_errors_logged(broker)


def assert_no_errors_logged(broker: BrokerProcess) -> None:
    errors = [r for r in broker.log_lines() if r.get("level") == "error"]
    assert errors == [], errors


def test_the_largest_messages_still_arrive_with_the_default_budgets(tmp_path: Path) -> None:
    # The official client's 4 MiB body limit, several at once on one connection, and a
    # 16 MiB request (the most the port takes by default): the budgets let them through.
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 1, 1))
    with running_broker(tmp_path) as broker:
        config = ClientConfiguration(broker.endpoint, Credentials())
        producer = Producer(config, (TOPIC,))
        producer.startup()
        try:
            bodies = [bytes([n]) * (4 * MiB - 4096) for n in range(6)]
            with ThreadPoolExecutor(len(bodies)) as pool:
                receipts = list(pool.map(lambda body: producer.send(big_message(body)), bodies))
            assert len({r.message_id for r in receipts}) == len(bodies)
        finally:
            producer.shutdown()
        with grpc.insecure_channel(
            broker.endpoint, options=[("grpc.max_send_message_length", -1)]
        ) as channel:
            request = spb.SendMessageRequest(
                messages=[
                    pb.Message(
                        topic=pb.Resource(name=TOPIC),
                        body=b"x" * (16 * MiB - 1024),
                        system_properties=pb.SystemProperties(
                            message_id="budget-16m", body_encoding=pb.Encoding.IDENTITY
                        ),
                    )
                ]
            )
            assert request.ByteSize() <= 16 * MiB
            answer = MessagingServiceStub(channel).SendMessage(request, timeout=60)
        # It arrived whole: the broker read it and refused its body as too large.
        assert answer.status.code == pb.Code.MESSAGE_BODY_TOO_LARGE, answer.status
        assert_no_errors_logged(broker)


def big_message(body: bytes) -> Message:
    message = Message()
    message.topic = TOPIC
    message.body = body
    return message


# -- HPACK --------------------------------------------------------------------------------


def flood_header_blocks(endpoint: str, stop: threading.Event, closed: list) -> None:  # type: ignore[type-arg]
    """Connection after connection, blocks of 16,000 references to one entry, until ``stop``."""
    request = encode_headers(grpc_request_headers(SEND))
    while not stop.is_set():
        client = RawClient(endpoint)
        # One entry in the table (a literal with incremental indexing), then the bombs.
        entry = b"\x40\x06x-bomb\x01v"
        client.send(fr.frame(fr.HEADERS, fr.END_HEADERS, 1, request + entry))
        bomb = request + b"\xbe" * 16_000
        stream_id = 3
        while not stop.is_set() and client.goaway is None and not client.send_failed:
            flags = fr.END_HEADERS | fr.END_STREAM
            client.send(fr.frame(fr.HEADERS, flags, stream_id, bomb))
            stream_id += 2
            client.read_for(0)
        if not stop.is_set():
            # Cut off: what the server said before it closed the connection.
            client.read_until(lambda c=client: c.closed, deadline_s=30)
            closed.append(client.goaway)
        client.close()


def test_a_flood_of_hpack_bombs_neither_stalls_other_clients_nor_goes_on(tmp_path: Path) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 1, 1))
    with running_broker(tmp_path) as broker, AdminClient(broker.endpoint) as admin:
        channel = grpc.insecure_channel(broker.endpoint)
        stub = MessagingServiceStub(channel)
        route = spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC))
        stop = threading.Event()
        closed: list = []  # type: ignore[type-arg]
        flooder = threading.Thread(
            target=flood_header_blocks, args=(broker.endpoint, stop, closed), daemon=True
        )
        with ResidentWatch(broker.proc.pid) as rss:
            flooder.start()
            try:
                probes = 0
                while probes < 20 or len(closed) < 3:
                    # The official clients' default request timeout is 3 s.
                    answer = stub.QueryRoute(route, timeout=3)
                    assert answer.status.code == pb.Code.OK
                    assert [t.name for t in admin.list_topics()] == [TOPIC]
                    probes += 1
                    assert probes < 2_000, f"only {len(closed)} flooding connections were closed"
                    time.sleep(0.05)
            finally:
                stop.set()
                flooder.join(30)
                channel.close()
            rss.settled()
        print(f"HPACK bombs: {rss.report()}")
        # One flooding connection at a time, each cut off within its header-list budget:
        # nothing of them stays but the working set's slack.
        assert rss.peak - rss.before <= SLACK, rss.report()
        for goaway in closed:
            assert goaway is not None, "a flooding connection was closed without a GOAWAY"
            code, debug = goaway
            assert code in (ErrorCode.ENHANCE_YOUR_CALM, ErrorCode.COMPRESSION_ERROR)
            assert b"SETTINGS_MAX_HEADER_LIST_SIZE" in debug, debug
        print(f"{probes} QueryRoute and ListTopics probes served; {len(closed)} flooders closed")
        assert_no_errors_logged(broker)
