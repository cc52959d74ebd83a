"""What the broker keeps per client is given back when the client leaves.

A real broker process with a 1-second ``--client-expiry``; 200 consumers at a time
arrive (Telemetry with Settings, a heartbeat, a receive) and leave, by
NotifyClientTermination or by dropping their connection, round after round. The broker's
``skiff_client_sessions`` gauge (its Prometheus endpoint) counts them in and, once they
have gone, back to where it started; a consumer of the same group that stays, with a
stream on each of two connections, is never forgotten, even when one of its
connections drops and the expiry passes.
"""

from __future__ import annotations

import asyncio

from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess
from tests.support.metrics_scrape import client_sessions
from tests.support.session_churn import Visitor, visit
from tests.support.waiting import wait_for

from skiff_broker.client.admin import AdminClient
from skiff_broker.metadata.topic_table import TopicConfig

TOPIC = "visited"
GROUP = "visitors"
VISITORS = 200
EXPIRY_S = 1.0

broker = module_broker(
    "session-release", "--client-expiry", str(EXPIRY_S), topics=[TopicConfig(TOPIC, 2, 2)]
)


def sessions(broker: BrokerProcess) -> int:
    """Simple-consumer sessions the broker remembers, as its metrics say."""
    return client_sessions(broker.metrics_url, "simple_consumer")


def live_consumers(broker: BrokerProcess) -> set[str]:
    with AdminClient(broker.endpoint) as admin:
        return {c.client_id for c in admin.describe_consumer_group(GROUP).consumers}


def test_sessions_of_consumers_that_left_are_released_round_after_round(
    broker: BrokerProcess,
) -> None:
    async def scenario() -> None:
        # One client that stays, with a Telemetry stream on each of two connections.
        stayer = [Visitor(broker.endpoint, "stayer", GROUP, TOPIC) for _ in range(2)]
        for connection in stayer:
            await connection.arrive()
        before = await asyncio.to_thread(sessions, broker)
        assert before == 1
        for round_number, how in enumerate(("terminate", "disconnect") * 2):

            def all_there() -> bool:
                return sessions(broker) == before + VISITORS

            await visit(
                broker.endpoint,
                VISITORS,
                group=GROUP,
                topic=TOPIC,
                how=how,
                prefix=f"round-{round_number}",
                while_present=lambda: asyncio.to_thread(
                    wait_for, all_there, f"{VISITORS} more sessions"
                ),
            )
            await asyncio.to_thread(
                wait_for,
                lambda: sessions(broker) == before,
                f"the sessions of the {VISITORS} consumers that left ({how}) released",
            )
        # One of the stayer's connections drops; its other stream keeps it, past the expiry.
        await stayer[0].leave("disconnect")
        await asyncio.sleep(3 * EXPIRY_S)
        assert await asyncio.to_thread(sessions, broker) == 1
        assert await asyncio.to_thread(live_consumers, broker) == {"stayer"}
        await stayer[1].leave("terminate")
        await asyncio.to_thread(wait_for, lambda: sessions(broker) == 0, "no session left")

    asyncio.run(scenario())
    broker.assert_loop_never_held()
