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
from skiff_broker.messaging import clients
from skiff_broker.messaging.clients import ClientRegistry, TelemetryOutbox
from skiff_broker.metadata.group_settings import GroupSettingsTable
from skiff_broker.metadata.topic_table import TopicTable
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
    registry.heartbeat("streaming", pb.ClientType.PUSH_CONSUMER, "billing", owner="")
    streaming = registry.session("streaming", owner="")
    registry.stream_opened(streaming, TelemetryOutbox(), "ipv4:127.0.0.1:1")
    for number in range(100):
        registry.heartbeat(f"client-{number}", pb.ClientType.SIMPLE_CONSUMER, "billing", owner="")
        # Every session is a consumer seen just now, so a group's consumers are all of them.
        assert len(registry.live_consumers()) <= 20
    # The newest and the one with an open stream are remembered.
    remembered = {s.client_id for s in registry.live_consumers()}
    assert {"streaming", "client-99"} <= remembered
    assert "client-0" not in remembered
    assert registry.session("streaming", owner="") is streaming


def test_live_consumers_have_a_stream_open_or_were_seen_lately(tmp_path: Path) -> None:
    registry = ClientRegistry(
        BrokerConfig(store=StoreConfig(data_dir=str(tmp_path))),
        TopicTable(str(tmp_path / "topics.json")),
    )
    registry.heartbeat("recent", pb.ClientType.SIMPLE_CONSUMER, "billing", owner="")
    registry.heartbeat("streaming", pb.ClientType.PUSH_CONSUMER, "billing", owner="")
    registry.stream_opened(
        registry.session("streaming", owner=""), TelemetryOutbox(), "ipv4:127.0.0.1:1"
    )
    registry.heartbeat("long-gone", pb.ClientType.SIMPLE_CONSUMER, "billing", owner="")
    registry.heartbeat("producer", pb.ClientType.PRODUCER, "", owner="")
    assert {s.client_id for s in registry.live_consumers()} == {"recent", "streaming", "long-gone"}

    # Seen longer ago than heartbeats come: only an open stream keeps a consumer live.
    for client_id in ("streaming", "long-gone"):
        registry.session(client_id, owner="").last_seen -= clients.LIVE_WITHOUT_STREAM_S + 1
    assert {s.client_id for s in registry.live_consumers()} == {"recent", "streaming"}
    registry.terminate("recent", owner="")
    assert {s.client_id for s in registry.live_consumers()} == {"streaming"}


def registry_in(tmp_path: Path) -> ClientRegistry:
    return ClientRegistry(
        BrokerConfig(store=StoreConfig(data_dir=str(tmp_path))),
        TopicTable(str(tmp_path / "topics.json")),
    )


def producer_settings(*topics: str) -> pb.Settings:
    return pb.Settings(
        client_type=pb.ClientType.PRODUCER,
        publishing=pb.Publishing(topics=[pb.Resource(name=t) for t in topics]),
    )


def streaming(registry: ClientRegistry, client_id: str, owner: str) -> clients.ClientSession:
    session = registry.session(client_id, owner=owner)
    registry.stream_opened(session, TelemetryOutbox(), "ipv4:127.0.0.1:1")
    return session


def test_a_producer_is_asked_only_about_the_topics_its_settings_name(tmp_path: Path) -> None:
    registry = registry_in(tmp_path)
    payer = streaming(registry, "payer-client", "payer")
    registry.apply_settings(payer, producer_settings("txpay"))
    # Settings that name no topic, and a producer heartbeat without Settings, claim nothing.
    empty = streaming(registry, "empty-client", "nobody")
    registry.apply_settings(empty, producer_settings())
    registry.heartbeat("beating-client", pb.ClientType.PRODUCER, "", owner="nobody")
    streaming(registry, "beating-client", "nobody")
    # A consumer's subscription is no publishing, whatever client type it says.
    posing = streaming(registry, "posing-client", "nobody")
    registry.apply_settings(
        posing,
        pb.Settings(
            client_type=pb.ClientType.PRODUCER,
            subscription=pb.Subscription(
                group=pb.Resource(name="g"),
                subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="txpay"))],
            ),
        ),
    )
    assert registry.producers_of("txpay") == [payer]
    assert registry.producers_of("other") == []
    # New Settings replace what the old ones named.
    registry.apply_settings(payer, producer_settings("other"))
    assert registry.producers_of("txpay") == []


def test_a_session_belongs_to_the_identity_that_opened_it(tmp_path: Path) -> None:
    registry = registry_in(tmp_path)
    victim = streaming(registry, "shared-id", "payer")
    registry.apply_settings(victim, producer_settings("txpay"))
    victim_outbox = victim.outbound
    # Another access key naming the same client id gets a session of its own ...
    intruder = streaming(registry, "shared-id", "mallory")
    assert intruder is not victim and victim.outbound is victim_outbox
    registry.apply_settings(intruder, producer_settings())
    assert registry.producers_of("txpay") == [victim]
    # ... and its termination ends only that one.
    registry.terminate("shared-id", owner="mallory")
    assert registry.session("shared-id", owner="payer") is victim
    assert registry.producers_of("txpay") == [victim]
    registry.terminate("shared-id", owner="payer")
    assert registry.producers_of("txpay") == []
    assert victim_outbox is not None and victim_outbox.put_nowait(command(1)) is False


def test_a_session_without_a_stream_is_forgotten_after_the_expiry_and_not_before(
    tmp_path: Path,
) -> None:
    registry = registry_in(tmp_path)
    expiry = session_expiry(registry)
    registry.heartbeat("left", pb.ClientType.SIMPLE_CONSUMER, "billing", owner="")
    registry.heartbeat("beating", pb.ClientType.SIMPLE_CONSUMER, "billing", owner="")
    left = registry.session("left", owner="")
    seen = left.last_seen
    assert registry.expire(now=seen + expiry - 1) == 0
    # ``beating`` heartbeats again just before the sweep; ``left`` said nothing.
    registry.session("beating", owner="").last_seen = seen + expiry
    assert registry.expire(now=seen + expiry + 1) == 1
    assert len(registry) == 1
    assert {s.client_id for s in registry.live_consumers()} == {"beating"}


def test_a_session_with_any_stream_open_is_never_expired(tmp_path: Path) -> None:
    registry = registry_in(tmp_path)
    session = registry.session("two-connections", owner="payer")
    first, second = TelemetryOutbox(), TelemetryOutbox()
    registry.stream_opened(session, first, "ipv4:127.0.0.1:1")
    registry.stream_opened(session, second, "ipv4:127.0.0.1:2")
    registry.apply_settings(session, producer_settings("txpay"))
    far_future = session.last_seen + 10 * session_expiry(registry)
    # The newer stream ends: the older one still carries the session's commands.
    registry.stream_closed(session, second)
    assert session.outbound is first
    assert registry.expire(now=far_future) == 0
    assert registry.producers_of("txpay") == [session]
    registry.stream_closed(session, first)
    assert session.outbound is None
    assert registry.expire(now=session.last_seen + session_expiry(registry) + 1) == 1
    assert len(registry) == 0


def test_termination_closes_every_stream_of_the_session(tmp_path: Path) -> None:
    registry = registry_in(tmp_path)
    session = registry.session("leaving", owner="")
    streams = [TelemetryOutbox(), TelemetryOutbox()]
    for number, outbox in enumerate(streams):
        registry.stream_opened(session, outbox, f"ipv4:127.0.0.1:{number}")
    registry.terminate("leaving", owner="")
    assert len(registry) == 0
    assert all(outbox.put_nowait(command(1)) is False for outbox in streams)


def session_expiry(registry: ClientRegistry) -> float:
    """The expiry ``registry_in`` gives its registries: the broker's default."""
    return BrokerConfig(store=StoreConfig(data_dir="unused")).client_expiry_s


def _consumer_settings(group: str) -> pb.Settings:
    return pb.Settings(
        client_type=pb.ClientType.PUSH_CONSUMER,
        subscription=pb.Subscription(
            group=pb.Resource(name=group),
            subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="payroll"))],
        ),
    )


def test_a_consumer_is_told_its_groups_own_retries(tmp_path: Path) -> None:
    """As RocketMQ's proxy: retryMaxTimes + 1 attempts and the groupRetryPolicy."""
    groups = GroupSettingsTable(str(tmp_path / "subscriptionGroup.json"))
    groups.load()
    groups.put(
        {
            "groupName": "fast",
            "retryMaxTimes": 2,
            "groupRetryPolicy": {
                "type": "EXPONENTIAL",
                "exponentialRetryPolicy": {"initial": 1000, "max": 60000, "multiplier": 3},
            },
        }
    )
    groups.put(
        {
            "groupName": "levels",
            "groupRetryPolicy": {
                "type": "CUSTOMIZED",
                "customizedRetryPolicy": {"levels": [500, 2000]},
            },
        }
    )
    config = BrokerConfig(store=StoreConfig(data_dir=str(tmp_path)))
    registry = ClientRegistry(config, TopicTable(str(tmp_path / "topics.json")), groups)

    fast = registry.apply_settings(streaming(registry, "a", ""), _consumer_settings("fast"))
    assert fast.backoff_policy.max_attempts == 3
    backoff = fast.backoff_policy.exponential_backoff
    assert (backoff.initial.ToMilliseconds(), backoff.max.ToMilliseconds()) == (1000, 60000)
    assert backoff.multiplier == 3

    levels = registry.apply_settings(streaming(registry, "b", ""), _consumer_settings("levels"))
    assert levels.backoff_policy.max_attempts == 17  # RocketMQ's default retryMaxTimes, 16
    assert [d.ToMilliseconds() for d in levels.backoff_policy.customized_backoff.next] == [
        500,
        2000,
    ]

    # A group without settings has the broker's attempts and RocketMQ's delay levels.
    plain = registry.apply_settings(streaming(registry, "c", ""), _consumer_settings("plain"))
    assert plain.backoff_policy.max_attempts == config.max_delivery_attempts
    assert plain.backoff_policy.customized_backoff.next[0].ToSeconds() == 1
