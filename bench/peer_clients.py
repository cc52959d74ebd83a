"""The clients of the peer benchmark: the same workloads in each system's own client.

Every workload is a coroutine run in a fresh event loop of the benchmark process.
A *producer* is one concurrent sender. In ``single`` mode it sends one message per
request and waits for the acknowledgement before the next; in ``batch`` mode it
uses the client's best throughput mode (batching or pipelining) and keeps up to
``BATCH_WINDOW // producers`` messages unacknowledged, so that every system holds
the same number of messages in flight whatever the producer count.

Message bodies start with the sender's ``perf_counter_ns`` (8 bytes), which the
end-to-end consumers read back: producer and consumer share this process's clock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import struct
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "broker"))

BATCH_WINDOW = 1024  # messages unacknowledged per run of batch mode, over all producers
FILL_CHUNK = 2048
STOP_DEADLINE_S = 30.0
E2E_SETTLE_S = 5.0  # how long the consumer may lag behind the last send
STAMP = struct.Struct("<q")


@dataclasses.dataclass
class Sample:
    messages: int
    seconds: float
    latencies: list[float] = dataclasses.field(default_factory=list)  # seconds
    errors: int = 0
    note: str = ""
    last_error: str = ""
    unmeasured: int = 0  # messages the broker handled beside these (a warm-up's)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


def make_body(size: int) -> bytes:
    return os.urandom(size)


def stamped(body: bytearray) -> bytes:
    STAMP.pack_into(body, 0, time.perf_counter_ns())
    return bytes(body)


class Window:
    """What completes while the measured window is open."""

    def __init__(self) -> None:
        self.open = False
        self.messages = 0
        self.errors = 0
        self.latencies: list[float] = []
        self.last_error = ""
        self.started = 0.0
        self.seconds = 0.0

    def begin(self) -> None:
        self.open = True
        self.started = time.perf_counter()

    def end(self) -> None:
        self.open = False
        self.seconds = time.perf_counter() - self.started

    def sample(self, note: str = "") -> Sample:
        return Sample(
            self.messages, self.seconds, self.latencies, self.errors, note, self.last_error
        )


async def run_producers(
    send: Callable[[int], Awaitable[None]],
    producers: int,
    chunk: int,
    warmup: float,
    seconds: float,
) -> Sample:
    """``producers`` tasks calling ``send(chunk)`` back to back; counts chunks done in time."""
    window = Window()
    stop = asyncio.Event()

    async def producer() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                await send(chunk)
            except Exception as exc:  # a refused send is counted, the run goes on
                if window.open:
                    window.errors += 1
                    window.last_error = repr(exc)[:200]
                await asyncio.sleep(0.01)
                continue
            if window.open:
                window.messages += chunk
                window.latencies.append(time.perf_counter() - start)

    tasks = [asyncio.create_task(producer()) for _ in range(producers)]
    await asyncio.sleep(warmup)
    window.begin()
    await asyncio.sleep(seconds)
    window.end()
    stop.set()
    _, late = await asyncio.wait(tasks, timeout=STOP_DEADLINE_S)
    for task in late:
        task.cancel()
    return window.sample()


async def paced(
    send_many: Callable[[list[bytes]], None], size: int, rate: float, seconds: float
) -> int:
    """Open loop: hand ``send_many`` the messages due every millisecond; returns how many."""
    body = bytearray(make_body(size))
    start = time.perf_counter()
    sent = 0
    while True:
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return sent
        due = int(elapsed * rate) - sent
        if due > 0:
            send_many([stamped(body) for _ in range(due)])
            sent += due
        await asyncio.sleep(0.001)


class Latencies:
    """Thread-safe collector of end-to-end latencies of stamped bodies sent after ``since``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.since_ns = 1 << 62  # nothing counts until armed
        self.values: list[float] = []
        self.seen = 0  # everything received, probes included

    def arm(self) -> None:
        with self.lock:
            self.values.clear()
            self.since_ns = time.perf_counter_ns()

    def record(self, bodies: list[bytes]) -> None:
        now = time.perf_counter_ns()
        with self.lock:
            self.seen += len(bodies)
            for body in bodies:
                sent = STAMP.unpack_from(body, 0)[0]
                if sent >= self.since_ns:
                    self.values.append((now - sent) / 1e9)


async def e2e_run(
    send_many: Callable[[list[bytes]], None],
    latencies: Latencies,
    size: int,
    rate: float,
    seconds: float,
) -> Sample:
    """Probe until the consumer sees messages, then send at ``rate`` and collect latencies."""
    body = bytearray(make_body(size))
    deadline = time.monotonic() + 60
    while latencies.seen == 0 and time.monotonic() < deadline:
        send_many([stamped(body)])
        await asyncio.sleep(0.5)
    if latencies.seen == 0:
        return Sample(0, seconds, note="the consumer received nothing within 60 s")
    await asyncio.sleep(1.0)
    latencies.arm()
    start = time.perf_counter()
    sent = await paced(send_many, size, rate, seconds)
    elapsed = time.perf_counter() - start
    end = time.monotonic() + E2E_SETTLE_S
    while time.monotonic() < end:
        with latencies.lock:
            if len(latencies.values) >= sent:
                break
        await asyncio.sleep(0.05)
    with latencies.lock:
        got = list(latencies.values)
    note = f"offered {sent / elapsed:,.0f} msg/s"
    if len(got) < sent:
        note += f"; {sent - len(got)} of {sent} not received within {E2E_SETTLE_S:.0f} s"
    return Sample(len(got), elapsed, got, sent - len(got), note)


def gather_tasks() -> tuple[set[asyncio.Future], Callable[[Awaitable[Any]], None]]:
    """Keep fire-and-forget sends alive until they finish."""
    pending: set[asyncio.Future] = set()

    def keep(awaitable: Awaitable[Any]) -> None:
        future = asyncio.ensure_future(awaitable)
        pending.add(future)
        future.add_done_callback(pending.discard)

    return pending, keep


async def wait_all(pending: set[asyncio.Future]) -> None:
    if pending:
        await asyncio.wait(set(pending), timeout=STOP_DEADLINE_S)


class Driver:
    """One client of one system. ``modes`` are the produce modes it is measured in;
    ``consumes`` is False for a client that only produces."""

    client = ""
    modes: tuple[str, ...] = ("batch", "single")
    consumes = True
    # Its own topic: a new Skiff group reads from the start, so a second client on the
    # same topic would first wade through the first one's messages.
    e2e_topic = "e2e"

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    async def produce(
        self, topic: str, size: int, producers: int, mode: str, warmup: float, seconds: float
    ) -> Sample:
        raise NotImplementedError

    async def fill(self, topic: str, size: int, count: int, limit_s: float) -> int:
        raise NotImplementedError

    async def drain(self, topic: str, count: int, limit_s: float) -> Sample:
        raise NotImplementedError

    async def e2e(self, topic: str, size: int, rate: float, seconds: float) -> Sample:
        raise NotImplementedError


def chunk_of(mode: str, producers: int) -> int:
    return max(1, BATCH_WINDOW // producers) if mode == "batch" else 1


async def fill_with(send: Callable[[int], Awaitable[int]], count: int, limit_s: float) -> int:
    """Call ``send(n)`` (returns how many were stored) with a few chunks in flight."""
    done = 0
    issued = 0
    end = time.monotonic() + limit_s

    async def worker() -> None:
        nonlocal done, issued
        while issued < count and time.monotonic() < end:
            n = min(FILL_CHUNK, count - issued)
            issued += n
            stored = await send(n)  # read done only after the await: workers interleave
            done += stored

    await asyncio.gather(*(worker() for _ in range(4)))
    return done


# -- Skiff's BatchingProducer and raw PullMessage (any RocketMQ 5 gRPC endpoint) -----------


class BatchingDriver(Driver):
    client = "Skiff BatchingProducer"
    modes = ("batch",)

    def _producer(self) -> Any:
        from skiff_broker.client.producer import BatchingProducer

        return BatchingProducer(self.endpoint, request_timeout_s=STOP_DEADLINE_S)

    async def produce(
        self, topic: str, size: int, producers: int, mode: str, warmup: float, seconds: float
    ) -> Sample:
        body = make_body(size)
        async with self._producer() as producer:

            async def send(n: int) -> None:
                await producer.send_batch(topic, [body] * n)

            return await run_producers(send, producers, chunk_of(mode, producers), warmup, seconds)

    async def fill(self, topic: str, size: int, count: int, limit_s: float) -> int:
        body = make_body(size)
        async with self._producer() as producer:

            async def send(n: int) -> int:
                got = await producer.send_batch(topic, [body] * n, return_exceptions=True)
                return sum(not isinstance(g, BaseException) for g in got)

            return await fill_with(send, count, limit_s)

    async def drain(self, topic: str, count: int, limit_s: float) -> Sample:
        return await asyncio.get_running_loop().run_in_executor(
            None, pull_consumer_drain, self.endpoint, topic, count, limit_s
        )

    async def e2e(self, topic: str, size: int, rate: float, seconds: float) -> Sample:
        from skiff_broker.client.pull_consumer import PullConsumer

        latencies = Latencies()
        stop = threading.Event()
        with PullConsumer(self.endpoint) as probe:
            queues = probe.queue_ids(topic)
        loop = asyncio.get_running_loop()
        # A thread for every queue: the default executor may have fewer.
        threads = concurrent.futures.ThreadPoolExecutor(len(queues))
        followers = [
            loop.run_in_executor(
                threads, pull_consumer_follow, self.endpoint, topic, q, latencies, stop
            )
            for q in queues
        ]
        pending, keep = gather_tasks()
        try:
            async with self._producer() as producer:

                def send_many(bodies: list[bytes]) -> None:
                    for body in bodies:
                        keep(producer.send(topic, body))

                await asyncio.sleep(0.5)
                sample = await e2e_run(send_many, latencies, size, rate, seconds)
                await wait_all(pending)
        finally:
            stop.set()
            await asyncio.wait(followers, timeout=STOP_DEADLINE_S)
            threads.shutdown(wait=False)
        sample.note = f"{sample.note}; Skiff PullConsumer long-polling each queue".strip("; ")
        return sample


def pull_consumer_drain(endpoint: str, topic: str, count: int, limit_s: float) -> Sample:
    """Skiff's PullConsumer reading each queue's [min, max) in turn, fetches pipelined.

    One thread: a Python consumer is bound by its interpreter lock, and threads
    per queue measured slower than one reading queue after queue.
    """
    from skiff_broker.client.pull_consumer import PullConsumer

    got = 0
    body_bytes = 0
    error = ""
    end = time.monotonic() + limit_s
    start = time.perf_counter()
    try:
        with PullConsumer(endpoint) as consumer:
            for queue in consumer.queue_ranges(topic):
                # Every message's body is looked at, as a consumer would.
                for message in consumer.read_range(
                    topic, queue.queue_id, queue.min_offset, queue.max_offset
                ):
                    got += 1
                    body_bytes += len(message.body)
                    if got % 4096 == 0 and time.monotonic() > end:
                        break
    except Exception as exc:
        error = repr(exc)[:200]
    elapsed = time.perf_counter() - start
    return Sample(
        min(got, count),
        elapsed,
        errors=1 if error else 0,
        note="skiff_broker.client.pull_consumer (record fetches), one thread",
        last_error=error,
    )


def pull_consumer_follow(
    endpoint: str, topic: str, queue: int, latencies: Latencies, stop: threading.Event
) -> None:
    """Long-poll one queue from its current end with Skiff's PullConsumer."""
    from skiff_broker.client.pull_consumer import PullConsumer

    with PullConsumer(endpoint) as consumer:
        offset = consumer.max_offset(topic, queue)
        while not stop.is_set():
            result = consumer.pull(topic, queue, offset, max_messages=4096, wait_s=0.5)
            if result.messages:
                latencies.record([m.body for m in result.messages])
            offset = result.next_offset


# -- the official RocketMQ 5 Python client (Skiff and RocketMQ) ----------------------------


def _official_config(endpoint: str) -> Any:
    from rocketmq import ClientConfiguration, Credentials

    return ClientConfiguration(endpoint, Credentials(), request_timeout=10)


def _official_message(topic: str, body: bytes) -> Any:
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = body
    message.tag = "bench"
    return message


class OfficialDriver(Driver):
    client = "official rocketmq-python-client"
    e2e_topic = "e2e-official"
    # The proxy refuses long polls under 5 s and wants the call deadline beyond them.
    AWAIT_S = 5

    def _producer(self, topic: str) -> Any:
        from rocketmq import Producer

        producer = Producer(_official_config(self.endpoint), (topic,))
        producer.startup()
        return producer

    async def produce(
        self, topic: str, size: int, producers: int, mode: str, warmup: float, seconds: float
    ) -> Sample:
        body = make_body(size)
        producer = self._producer(topic)
        try:

            async def send(n: int) -> None:
                # send_async runs the call on the client's own loop; send() is send_async().result()
                await asyncio.gather(
                    *(
                        asyncio.wrap_future(producer.send_async(_official_message(topic, body)))
                        for _ in range(n)
                    )
                )

            return await run_producers(send, producers, chunk_of(mode, producers), warmup, seconds)
        finally:
            producer.shutdown()

    async def fill(self, topic: str, size: int, count: int, limit_s: float) -> int:
        body = make_body(size)
        producer = self._producer(topic)
        try:

            async def send(n: int) -> int:
                got = await asyncio.gather(
                    *(
                        asyncio.wrap_future(producer.send_async(_official_message(topic, body)))
                        for _ in range(n)
                    ),
                    return_exceptions=True,
                )
                return sum(not isinstance(g, BaseException) for g in got)

            return await fill_with(send, count, limit_s)
        finally:
            producer.shutdown()

    def _consumer(self, topic: str, group: str) -> Any:
        from rocketmq import FilterExpression, SimpleConsumer

        consumer = SimpleConsumer(
            _official_config(self.endpoint), group, {topic: FilterExpression("*")}, self.AWAIT_S
        )
        consumer.startup()
        time.sleep(1.0)  # the consumer's settings reach the broker over its telemetry stream
        return consumer

    async def drain(self, topic: str, count: int, limit_s: float) -> Sample:
        """receive(32) and ack each message, in 8 threads."""
        loop = asyncio.get_running_loop()
        # Started from a thread: started inside a running event loop, receive() finds nothing.
        consumer = await loop.run_in_executor(
            None, self._consumer, topic, f"bench-drain-{topic}-{os.getpid()}"
        )
        state = {"got": 0, "errors": 0, "last": ""}
        lock = threading.Lock()
        stop = threading.Event()

        def drainer() -> None:
            while not stop.is_set():
                try:
                    messages = consumer.receive(32, 60)
                except Exception as exc:
                    with lock:
                        state["errors"] += 1
                        state["last"] = repr(exc)[:200]
                    continue
                acked = 0
                for message in messages:
                    try:
                        consumer.ack(message)
                        acked += 1
                    except Exception as exc:
                        with lock:
                            state["errors"] += 1
                            state["last"] = repr(exc)[:200]
                with lock:
                    state["got"] += acked
                    if state["got"] >= count:
                        stop.set()

        start = time.perf_counter()
        try:
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                futures = [pool.submit(drainer) for _ in range(8)]
                await loop.run_in_executor(None, stop.wait, limit_s)
                elapsed = time.perf_counter() - start
                stop.set()
                concurrent.futures.wait(futures)
        finally:
            consumer.shutdown()
        return Sample(
            min(state["got"], count), elapsed, errors=state["errors"], last_error=state["last"]
        )

    async def e2e(self, topic: str, size: int, rate: float, seconds: float) -> Sample:
        """send_async at the rate; 4 threads receive (no acks: the window ends first)."""
        latencies = Latencies()
        loop = asyncio.get_running_loop()
        consumer = await loop.run_in_executor(
            None, self._consumer, topic, f"bench-e2e-{os.getpid()}"
        )
        producer = self._producer(topic)
        stop = threading.Event()

        def receiver() -> None:
            while not stop.is_set():
                try:
                    messages = consumer.receive(64, 120)
                except Exception:
                    continue
                latencies.record([m.body for m in messages])

        threads = [threading.Thread(target=receiver, daemon=True) for _ in range(4)]
        for thread in threads:
            thread.start()
        try:

            def send_many(bodies: list[bytes]) -> None:
                for body in bodies:
                    producer.send_async(_official_message(topic, body))

            return await e2e_run(send_many, latencies, size, rate, seconds)
        finally:
            stop.set()
            producer.shutdown()
            consumer.shutdown()


# -- Redis Streams -------------------------------------------------------------------------


class RedisDriver(Driver):
    client = "redis-py (asyncio, hiredis)"

    def _client(self) -> Any:
        import redis.asyncio as redis

        host, _, port = self.endpoint.rpartition(":")
        return redis.Redis(host=host, port=int(port), max_connections=256)

    async def produce(
        self, topic: str, size: int, producers: int, mode: str, warmup: float, seconds: float
    ) -> Sample:
        body = make_body(size)
        client = self._client()
        try:

            async def send(n: int) -> None:
                if n == 1:
                    await client.xadd(topic, {"b": body})
                    return
                pipe = client.pipeline(transaction=False)
                for _ in range(n):
                    pipe.xadd(topic, {"b": body})
                await pipe.execute()

            return await run_producers(send, producers, chunk_of(mode, producers), warmup, seconds)
        finally:
            await client.aclose()

    async def fill(self, topic: str, size: int, count: int, limit_s: float) -> int:
        body = make_body(size)
        client = self._client()
        try:

            async def send(n: int) -> int:
                pipe = client.pipeline(transaction=False)
                for _ in range(n):
                    pipe.xadd(topic, {"b": body})
                return len(await pipe.execute())

            return await fill_with(send, count, limit_s)
        finally:
            await client.aclose()

    async def drain(self, topic: str, count: int, limit_s: float) -> Sample:
        """XREAD COUNT 10000 from the start, one reader (a stream is one ordered log)."""
        client = self._client()
        got = 0
        last = b"0-0"
        start = time.perf_counter()
        end = time.monotonic() + limit_s
        try:
            while got < count and time.monotonic() < end:
                reply = await client.xread({topic: last}, count=10000)
                if not reply:
                    break
                entries = reply[0][1]
                got += len(entries)
                last = entries[-1][0]
        finally:
            await client.aclose()
        return Sample(min(got, count), time.perf_counter() - start)

    async def e2e(self, topic: str, size: int, rate: float, seconds: float) -> Sample:
        latencies = Latencies()
        client = self._client()
        reader = self._client()
        stop = asyncio.Event()

        async def follow() -> None:
            last = b"$"
            while not stop.is_set():
                reply = await reader.xread({topic: last}, count=10000, block=200)
                if reply:
                    entries = reply[0][1]
                    last = entries[-1][0]
                    latencies.record([fields[b"b"] for _, fields in entries])

        follower = asyncio.create_task(follow())
        pending, keep = gather_tasks()
        try:
            await asyncio.sleep(0.3)

            def send_many(bodies: list[bytes]) -> None:
                pipe = client.pipeline(transaction=False)
                for body in bodies:
                    pipe.xadd(topic, {"b": body})
                keep(pipe.execute())

            sample = await e2e_run(send_many, latencies, size, rate, seconds)
            await wait_all(pending)
            return sample
        finally:
            stop.set()
            await asyncio.wait([follower], timeout=STOP_DEADLINE_S)
            await client.aclose()
            await reader.aclose()


# -- NATS JetStream ------------------------------------------------------------------------


class NatsDriver(Driver):
    client = "nats-py (asyncio)"

    async def _connect(self) -> Any:
        import nats

        nc = await nats.connect(self.endpoint, pending_size=64 << 20)
        return nc

    async def _stream(self, js: Any, topic: str) -> None:
        from nats.js.api import StorageType, StreamConfig

        try:
            await js.stream_info(topic.upper())
        except Exception:
            await js.add_stream(
                StreamConfig(name=topic.upper(), subjects=[topic], storage=StorageType.FILE)
            )

    async def produce(
        self, topic: str, size: int, producers: int, mode: str, warmup: float, seconds: float
    ) -> Sample:
        body = make_body(size)
        nc = await self._connect()
        try:
            js = nc.jetstream(publish_async_max_pending=BATCH_WINDOW * 4)
            await self._stream(js, topic)

            async def send(n: int) -> None:
                if n == 1:
                    await js.publish(topic, body)
                    return
                acks = [await js.publish_async(topic, body) for _ in range(n)]
                await asyncio.gather(*acks)

            return await run_producers(send, producers, chunk_of(mode, producers), warmup, seconds)
        finally:
            await nc.close()

    async def fill(self, topic: str, size: int, count: int, limit_s: float) -> int:
        body = make_body(size)
        nc = await self._connect()
        try:
            js = nc.jetstream(publish_async_max_pending=FILL_CHUNK * 4)
            await self._stream(js, topic)

            async def send(n: int) -> int:
                acks = [await js.publish_async(topic, body) for _ in range(n)]
                got = await asyncio.gather(*acks, return_exceptions=True)
                return sum(not isinstance(g, BaseException) for g in got)

            return await fill_with(send, count, limit_s)
        finally:
            await nc.close()

    async def drain(self, topic: str, count: int, limit_s: float) -> Sample:
        """A durable pull consumer without acks, fetching 4096 at a time."""
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        nc = await self._connect()
        got = 0
        errors = 0
        start = time.perf_counter()
        end = time.monotonic() + limit_s
        try:
            js = nc.jetstream()
            subscription = await js.pull_subscribe(
                topic,
                durable="bench-drain",
                config=ConsumerConfig(
                    ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, max_waiting=16
                ),
            )
            start = time.perf_counter()
            while got < count and time.monotonic() < end:
                try:
                    messages = await subscription.fetch(4096, timeout=2)
                except TimeoutError:
                    break
                except Exception:
                    errors += 1
                    continue
                got += len(messages)
        finally:
            await nc.close()
        return Sample(min(got, count), time.perf_counter() - start, errors=errors)

    async def e2e(self, topic: str, size: int, rate: float, seconds: float) -> Sample:
        from nats.js.api import DeliverPolicy

        latencies = Latencies()
        nc = await self._connect()
        pending, keep = gather_tasks()
        try:
            js = nc.jetstream(publish_async_max_pending=1 << 20)
            await self._stream(js, topic)

            async def on_message(message: Any) -> None:
                latencies.record([message.data])

            await js.subscribe(
                topic, cb=on_message, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW
            )

            def send_many(bodies: list[bytes]) -> None:
                async def publish() -> None:
                    acks = [await js.publish_async(topic, body) for body in bodies]
                    await asyncio.gather(*acks)

                keep(publish())

            sample = await e2e_run(send_many, latencies, size, rate, seconds)
            await wait_all(pending)
            return sample
        finally:
            await nc.close()


# -- Kafka ---------------------------------------------------------------------------------


class KafkaDriver(Driver):
    client = "confluent-kafka (librdkafka)"

    def _producer(self, mode: str) -> Any:
        from confluent_kafka import Producer

        return Producer(
            {
                "bootstrap.servers": self.endpoint,
                "acks": "all",
                # batch: librdkafka's own batching; single: every message its own request
                "linger.ms": 5 if mode == "batch" else 0,
                "batch.size": 1 << 20,
                "queue.buffering.max.messages": 1 << 20,
                "enable.idempotence": False,
            }
        )

    class _Poller:
        """A thread serving the producer's delivery callbacks."""

        def __init__(self, producer: Any) -> None:
            self.producer = producer
            self.stop = threading.Event()
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

        def _run(self) -> None:
            while not self.stop.is_set():
                self.producer.poll(0.005)

        def close(self) -> None:
            self.producer.flush(STOP_DEADLINE_S)
            self.stop.set()
            self.thread.join()

    def _send_many(self, producer: Any, topic: str, bodies: list[bytes]) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        left = [len(bodies)]
        failed: list[str] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                failed.append(str(error))
            left[0] -= 1
            if left[0] == 0:
                loop.call_soon_threadsafe(_finish)

        def _finish() -> None:
            if future.done():
                return
            if failed:
                future.set_exception(RuntimeError(failed[0]))
            else:
                future.set_result(None)

        for body in bodies:
            while True:
                try:
                    producer.produce(topic, body, on_delivery=delivered)
                    break
                except BufferError:
                    time.sleep(0.001)
        return future

    async def produce(
        self, topic: str, size: int, producers: int, mode: str, warmup: float, seconds: float
    ) -> Sample:
        body = make_body(size)
        producer = self._producer(mode)
        poller = self._Poller(producer)
        try:

            async def send(n: int) -> None:
                await self._send_many(producer, topic, [body] * n)

            return await run_producers(send, producers, chunk_of(mode, producers), warmup, seconds)
        finally:
            poller.close()

    async def fill(self, topic: str, size: int, count: int, limit_s: float) -> int:
        body = make_body(size)
        producer = self._producer("batch")
        poller = self._Poller(producer)
        try:

            async def send(n: int) -> int:
                try:
                    await self._send_many(producer, topic, [body] * n)
                except RuntimeError:
                    return 0
                return n

            return await fill_with(send, count, limit_s)
        finally:
            poller.close()

    def _consumer(self, topic: str, beginning: bool) -> Any:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.endpoint,
                "group.id": f"bench-{os.getpid()}-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "fetch.max.bytes": 64 << 20,
                "max.partition.fetch.bytes": 16 << 20,
                "fetch.wait.max.ms": 10,
            }
        )
        start = OFFSET_BEGINNING if beginning else OFFSET_END
        consumer.assign([TopicPartition(topic, p, start) for p in range(8)])
        return consumer

    async def drain(self, topic: str, count: int, limit_s: float) -> Sample:
        def run() -> Sample:
            consumer = self._consumer(topic, beginning=True)
            got = 0
            errors = 0
            start = time.perf_counter()
            end = time.monotonic() + limit_s
            try:
                while got < count and time.monotonic() < end:
                    for message in consumer.consume(10000, 1.0):
                        if message.error() is None:
                            got += 1
                        else:
                            errors += 1
            finally:
                consumer.close()
            return Sample(min(got, count), time.perf_counter() - start, errors=errors)

        return await asyncio.get_running_loop().run_in_executor(None, run)

    async def e2e(self, topic: str, size: int, rate: float, seconds: float) -> Sample:
        latencies = Latencies()
        consumer = self._consumer(topic, beginning=False)
        stop = threading.Event()

        def follow() -> None:
            while not stop.is_set():
                batch = consumer.consume(10000, 0.05)
                latencies.record([m.value() for m in batch if m.error() is None])

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        producer = self._producer("batch")
        poller = self._Poller(producer)
        try:

            def send_many(bodies: list[bytes]) -> None:
                self._send_many(producer, topic, bodies)

            return await e2e_run(send_many, latencies, size, rate, seconds)
        finally:
            poller.close()
            stop.set()
            thread.join()
            consumer.close()


# -- the official Java client (a JVM of its own per workload) ------------------------------


class JavaClientDriver:
    """The official Java client 5.x with its defaults (TLS on), as tests/official_clients runs
    it. Each workload is one JVM that handles a fixed number of messages and reports how long
    that took (its start-up excluded) and, for sends, each send's latency."""

    client = "official Java client 5.2.0 (TLS)"
    topic = "java"
    push_topic = "java-push"  # empty until the push workload: no backlog to deliver first
    IN_FLIGHT = 256  # sendAsync calls unacknowledged at once
    THREADS = 16  # threads of blocking send

    def __init__(self, endpoint: str, log_dir: Path) -> None:
        sys.path.insert(0, str(ROOT))
        from tests.official_clients import java_client

        self.endpoint = endpoint
        self.log_dir = log_dir
        self.program = java_client()

    def _run(self, mode: str, limit_s: float, **options: object) -> Sample:
        from tests.official_clients import run_client

        options.setdefault("topic", self.topic)
        command = self.program.command(mode, self.log_dir, endpoint=self.endpoint, **options)
        summary = run_client(command, self.log_dir, timeout_s=limit_s + 120).summary
        messages = summary["messages"]
        client_us = summary["cpu_seconds"] / messages * 1e6 if messages else 0.0
        return Sample(
            messages,
            summary["seconds"],
            latencies=summary["latencies_s"],
            errors=summary["errors"],
            # What the client itself spends per message, on the same CPUs as the broker.
            note=f"client {client_us:,.0f} µs/msg",
            last_error=summary["last_error"][:200],
            unmeasured=summary.get("unmeasured_messages", 0),
        )

    def send_async(self, size: int, count: int, limit_s: float, in_flight: int = 0) -> Sample:
        return self._run(
            "send-async", limit_s, count=count, size=size, in_flight=in_flight or self.IN_FLIGHT
        )

    def send_blocking(self, size: int, count: int, limit_s: float, rate: float = 0.0) -> Sample:
        """``rate`` > 0: the sends start at that many per second (an offered rate)."""
        return self._run(
            "send-blocking", limit_s, count=count, size=size, threads=self.THREADS, rate=rate
        )

    def drain(self, count: int, limit_s: float) -> Sample:
        group = f"bench-java-{os.getpid()}"
        return self._run("drain", limit_s, count=count, group=group, deadline_s=int(limit_s))

    def push_e2e(self, size: int, count: int, rate: float, warmup_s: int, limit_s: float) -> Sample:
        """A PushConsumer on an empty topic; ``count`` sends paced at ``rate`` per second,
        after ``warmup_s`` seconds of unmeasured sends at that pace."""
        return self._run(
            "push-e2e",
            limit_s + warmup_s,
            topic=self.push_topic,
            count=count,
            size=size,
            rate=rate,
            warmup_s=warmup_s,
            group=f"bench-java-push-{os.getpid()}",
            deadline_s=int(limit_s + warmup_s),
        )


class RemotingClientDriver:
    """The classic RocketMQ 4.x client (rocketmq-client, remoting protocol) with its defaults,
    given a name-server address: Skiff's remoting port, or RocketMQ's name server, whose
    routes lead to the broker's own remoting port (no proxy). One JVM per workload handles
    a fixed number of messages and reports how long that took (its start-up and the route
    fetch excluded) and, for sends, each send's latency."""

    client = "rocketmq-client 4.9.8 (remoting)"
    topic = "remoting"
    warmup_topic = "remoting-warmup"
    IN_FLIGHT = 256  # async sends unanswered at once
    THREADS = 16  # threads of sync send

    def __init__(self, namesrv: str, log_dir: Path) -> None:
        sys.path.insert(0, str(ROOT))
        from tests.official_clients import remoting_bench_java_client

        self.namesrv = namesrv
        self.log_dir = log_dir
        self.program = remoting_bench_java_client()

    def _run(self, mode: str, limit_s: float, **options: object) -> Sample:
        from tests.official_clients import run_client

        options.setdefault("topic", self.topic)
        command = self.program.command(mode, self.log_dir, namesrv=self.namesrv, **options)
        summary = run_client(command, self.log_dir, timeout_s=limit_s + 120).summary
        messages = summary["messages"]
        client_us = summary["cpu_seconds"] / messages * 1e6 if messages else 0.0
        return Sample(
            messages,
            summary["seconds"],
            latencies=summary["latencies_s"],
            errors=summary["errors"],
            note=f"client {client_us:,.0f} µs/msg",
            last_error=summary["last_error"][:200],
        )

    def send_sync(self, size: int, count: int, limit_s: float) -> Sample:
        return self._run("send-sync", limit_s, count=count, size=size, threads=self.THREADS)

    def send_async(self, size: int, count: int, limit_s: float, topic: str = "") -> Sample:
        return self._run(
            "send-async",
            limit_s,
            topic=topic or self.topic,
            count=count,
            size=size,
            in_flight=self.IN_FLIGHT,
        )

    def push(self, count: int, limit_s: float, topic: str = "") -> Sample:
        """A new group's DefaultMQPushConsumer reads ``count`` messages from the start."""
        group = f"bench-remoting-push-{os.getpid()}-{topic or self.topic}"
        return self._run(
            "push",
            limit_s,
            topic=topic or self.topic,
            count=count,
            group=group,
            deadline_s=int(limit_s),
        )

    def warm_up(self, size: int, count: int, limit_s: float) -> None:
        """Unmeasured async sends and their push consumption on a topic of their own: a JVM
        broker compiles its send and pull paths in its first thousands of requests."""
        self.send_async(size, count, limit_s, topic=self.warmup_topic)
        self.push(count, limit_s, topic=self.warmup_topic)


class BatchingProducerDriver(BatchingDriver):
    """The batching producer alone: RocketMQ 5.3's proxy does not implement PullMessage."""

    consumes = False


DRIVERS: dict[str, tuple[type[Driver], ...]] = {
    "skiff": (BatchingDriver, OfficialDriver),
    "rocketmq": (OfficialDriver, BatchingProducerDriver),
    "redis": (RedisDriver,),
    "nats": (NatsDriver,),
    "kafka": (KafkaDriver,),
}
