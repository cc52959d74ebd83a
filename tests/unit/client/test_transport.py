"""Every Skiff client calls brokers through one transport: same headers, signing, errors.

A real gRPC server on loopback answers every call NOT_FOUND and records the headers it
received, so what each client sends and raises is what a broker would see and answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator

import grpc
import pytest

from skiff_broker import __version__
from skiff_broker.client.admin import AdminClient
from skiff_broker.client.credentials import Credentials
from skiff_broker.client.errors import NotFound
from skiff_broker.client.messaging import MessagingClient
from skiff_broker.client.producer import BatchingProducer
from skiff_broker.client.pull_consumer import PullConsumer

KEYS = Credentials("reader", "its-secret")


class _Recorder(grpc.GenericRpcHandler):
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []
        self._lock = threading.Lock()

    def service(self, handler_call_details):
        method = handler_call_details.method
        headers = dict(handler_call_details.invocation_metadata)

        def refuse(request: bytes, context: grpc.ServicerContext) -> bytes:
            with self._lock:
                self.calls.append((method, headers))
            context.abort(grpc.StatusCode.NOT_FOUND, f"nothing here answers {method}")

        return grpc.unary_unary_rpc_method_handler(refuse)


@pytest.fixture
def server() -> Iterator[tuple[str, _Recorder]]:
    recorder = _Recorder()
    made = grpc.server(
        concurrent.futures.ThreadPoolExecutor(max_workers=4),
        handlers=[recorder],
    )
    port = made.add_insecure_port("127.0.0.1:0")
    made.start()
    try:
        yield f"127.0.0.1:{port}", recorder
    finally:
        made.stop(None)


def _produce(endpoint: str) -> None:
    async def send() -> None:
        async with BatchingProducer(endpoint, credentials=KEYS) as producer:
            await producer.send("orders", b"body")

    asyncio.run(send())


def test_every_client_identifies_itself_signs_and_names_the_broker_in_errors(server) -> None:
    endpoint, recorder = server
    calls = {
        "admin": lambda: AdminClient(endpoint, credentials=KEYS).get_topic("orders"),
        "messaging": lambda: MessagingClient(endpoint, credentials=KEYS).writable_groups("o"),
        "pull": lambda: PullConsumer(endpoint, credentials=KEYS).queue_ids("orders"),
        "producer": lambda: _produce(endpoint),
    }
    client_ids = set()
    for name, call in calls.items():
        recorder.calls.clear()
        with pytest.raises(NotFound, match="nothing here answers /"):
            call()
        ((_, headers),) = recorder.calls
        assert headers["x-mq-protocol"] == "GRPC_V2", name
        assert headers["x-mq-language"] == "PYTHON", name
        assert headers["x-mq-client-version"] == __version__, name
        assert headers["x-mq-request-id"], name
        assert headers["authorization"].startswith("MQv2-HMAC-SHA1 Credential=reader,"), name
        assert headers["x-mq-date-time"], name
        client_ids.add(headers["x-mq-client-id"])
    # Each client is its own client to the broker.
    assert len(client_ids) == len(calls)


def test_a_client_keeps_its_id_and_numbers_each_request(server) -> None:
    endpoint, recorder = server
    with PullConsumer(endpoint) as consumer:
        for _ in range(2):
            with pytest.raises(NotFound):
                consumer.queue_ids("orders")
    (_, first), (_, second) = recorder.calls
    assert first["x-mq-client-id"] == second["x-mq-client-id"]
    assert first["x-mq-request-id"] != second["x-mq-request-id"]
    # Unsigned without credentials: a broker with authentication off needs nothing more.
    assert "authorization" not in first
