"""Long polling across threads: a message dispatched while a receive reads is never missed,
whether or not the dispatcher saw the receive waiting."""

from __future__ import annotations

import asyncio
import threading

from skiff_broker.delivery.long_polling import ArrivalHub


def _arrive_from_dispatcher_thread(hub: ArrivalHub, topic: str) -> None:
    thread = threading.Thread(target=hub.on_arrival, args=({(topic, 0)},))
    thread.start()
    thread.join()


def test_a_message_dispatched_during_the_read_ends_the_wait() -> None:
    async def main() -> str | None:
        hub = ArrivalHub(asyncio.get_running_loop())
        reads: list[int] = []

        def read() -> str | None:
            reads.append(1)
            if len(reads) == 1:
                # Dispatched after the read looked, before the receive registered to wait.
                _arrive_from_dispatcher_thread(hub, "orders")
                return None
            return "message"

        # A lost wake-up would wait the whole minute; the guard turns that into a failure.
        return await asyncio.wait_for(hub.poll("orders", 60.0, read, lambda r: r is None), 30)

    assert asyncio.run(main()) == "message"


def test_a_message_dispatched_while_waiting_ends_the_wait() -> None:
    async def main() -> str | None:
        hub = ArrivalHub(asyncio.get_running_loop())
        stored: list[str] = []

        async def dispatch_later() -> None:
            await asyncio.sleep(0.05)
            stored.append("message")
            await asyncio.to_thread(hub.on_arrival, {("orders", 3)})

        dispatching = asyncio.create_task(dispatch_later())
        got = await asyncio.wait_for(
            hub.poll("orders", 60.0, lambda: stored[0] if stored else None, lambda r: r is None),
            30,
        )
        await dispatching
        return got

    assert asyncio.run(main()) == "message"


def test_arrivals_on_other_topics_do_not_end_the_wait() -> None:
    async def main() -> bool:
        hub = ArrivalHub(asyncio.get_running_loop())
        since = hub.arrivals("orders")

        async def other_topic_later() -> None:
            await asyncio.sleep(0.05)
            await asyncio.to_thread(hub.on_arrival, {("payments", 0)})

        noise = asyncio.create_task(other_topic_later())
        await asyncio.sleep(0)
        woken = await hub.wait("orders", 0.5, since)
        await noise
        return woken

    assert asyncio.run(main()) is False


def test_arrivals_on_other_topics_during_the_read_do_not_end_the_wait() -> None:
    async def main() -> tuple[str | None, int]:
        hub = ArrivalHub(asyncio.get_running_loop())
        reads: list[int] = []

        def read() -> str | None:
            reads.append(1)
            # Every read overlaps another topic's arrival, and this topic gets none.
            _arrive_from_dispatcher_thread(hub, "payments")
            return None

        got = await hub.poll("orders", 0.3, read, lambda r: r is None)
        return got, len(reads)

    got, reads = asyncio.run(main())
    # Woken by nothing, the poll read once and once more at its deadline: no re-reading
    # for other topics' messages.
    assert got is None and reads <= 2
