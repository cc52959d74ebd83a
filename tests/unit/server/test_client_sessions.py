"""What the broker keeps per client is bounded: Telemetry outboxes and sessions.

tests/integration/test_bounded_memory.py holds a real broker to its memory budget
with never-reading streams; these check the bounds themselves.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from skiff_broker.config import BrokerConfig
from skiff_broker.metadata.topic_table import TopicTable
from skiff_broker.server import clients
from skiff_broker.server.clients import ClientRegistry, TelemetryOutbox
from skiff_broker.store.config import StoreConfig


def command(number: int) -> spb.TelemetryCommand:
    return spb.TelemetryCommand(settings=pb.Settings(request_timeout={"seconds": number}))


def test_a_full_outbox_holds_the_writer_until_the_stream_takes_a_reply() -> None:
    async def scenario() -> None:
        outbox = TelemetryOutbox(limit=2)
        for number in range(2):
            assert await outbox.put(command(number))
        blocked = asyncio.ensure_future(outbox.put(command(2)))
        await asyncio.sleep(0)
        assert not blocked.done() and len(outbox) == 2
        # A broker-initiated command finds no room and is dropped, not queued.
        assert not outbox.put_nowait(command(99))
        assert (await outbox.get()) == command(0)
        assert await blocked
        assert [await outbox.get(), await outbox.get()] == [command(1), command(2)]
        outbox.close()
        assert await outbox.get() is None
        assert not await outbox.put(command(3))

    asyncio.run(scenario())


def test_closing_releases_a_writer_waiting_for_room() -> None:
    async def scenario() -> None:
        outbox = TelemetryOutbox(limit=1)
        assert await outbox.put(command(0))
        waiting = asyncio.ensure_future(outbox.put(command(1)))
        await asyncio.sleep(0)
        outbox.close()
        assert await waiting is False
        # What was queued before the close is still handed out, then the end.
        assert await outbox.get() == command(0)
        assert await outbox.get() is None

    asyncio.run(scenario())


def test_sessions_are_capped_forgetting_the_longest_idle_without_a_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(clients, "MAX_SESSIONS", 20)
    registry = ClientRegistry(
        BrokerConfig(store=StoreConfig(data_dir=str(tmp_path))),
        TopicTable(str(tmp_path / "topics.json")),
    )
    registry.heartbeat("streaming", pb.ClientType.PUSH_CONSUMER, "billing")
    streaming = registry.session("streaming")
    streaming.outbound = TelemetryOutbox()
    for number in range(100):
        registry.heartbeat(f"client-{number}", pb.ClientType.SIMPLE_CONSUMER, "billing")
        # Every session is a consumer seen just now, so a group's consumers are all of them.
        assert len(registry.live_consumers()) <= 20
    # The newest and the one with an open stream are remembered.
    remembered = {s.client_id for s in registry.live_consumers()}
    assert {"streaming", "client-99"} <= remembered
    assert "client-0" not in remembered
    assert registry.session("streaming") is streaming


def test_live_consumers_have_a_stream_open_or_were_seen_lately(tmp_path: Path) -> None:
    registry = ClientRegistry(
        BrokerConfig(store=StoreConfig(data_dir=str(tmp_path))),
        TopicTable(str(tmp_path / "topics.json")),
    )
    registry.heartbeat("recent", pb.ClientType.SIMPLE_CONSUMER, "billing")
    registry.heartbeat("streaming", pb.ClientType.PUSH_CONSUMER, "billing")
    registry.session("streaming").outbound = TelemetryOutbox()
    registry.heartbeat("long-gone", pb.ClientType.SIMPLE_CONSUMER, "billing")
    registry.heartbeat("producer", pb.ClientType.PRODUCER, "")
    assert {s.client_id for s in registry.live_consumers()} == {"recent", "streaming", "long-gone"}

    # Seen longer ago than heartbeats come: only an open stream keeps a consumer live.
    for client_id in ("streaming", "long-gone"):
        registry.session(client_id).last_seen -= clients.LIVE_WITHOUT_STREAM_S + 1
    assert {s.client_id for s in registry.live_consumers()} == {"recent", "streaming"}
    registry.terminate("recent")
    assert {s.client_id for s in registry.live_consumers()} == {"streaming"}
