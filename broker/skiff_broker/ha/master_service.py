"""The master's side of replication: serve each replica the commit log from where it stands.

One asyncio task per replica connection, on the broker's event loop. First the
peer proves it holds the group's secret (:mod:`.peer_auth`); one that does not is
logged (rate-limited, with its address) and dropped before it learns anything. After
the handshake (the replica's offset and epochs against the master's, which decide
where its copy continues) the session sends the log in runs of at most
``transfer_batch_bytes``, one segment at a time, straight from the mapped
segment; when the replica has everything it waits for the next append, and
sends a heartbeat when idle. The replica's ACKs move its acknowledged offset,
which SYNC writers wait on (:mod:`.in_sync`). Topic config, consumer offsets,
users and ACLs follow as METADATA frames whenever they change (looked at once a
``metadata_interval``), and once more as they stand when the master stops cleanly,
before its Lease passes (:meth:`ReplicationMaster.send_final_metadata`).

With --tls-ca and a certificate the connection is mutual TLS before anything else
(:mod:`..tls.peers`), from its first byte, through the client port's listener
(:mod:`..frontdoor.listener`): a replica whose certificate does not chain to the CA is
logged with its address and dropped before the secret's proof.

Outside a Lease, each replica's client endpoint from its HELLO goes into the
replica book (:mod:`.replica_book`) once it is accepted, so that this broker,
started again as master, can ask it whether it was promoted meanwhile.

An ACK counts only up to what this connection has sent: a peer that claims more
is dropped and its claim counts for nothing, so no write is acknowledged as
replicated on the word of a replica that does not hold it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable

from ..frontdoor.connection_limits import ConnectionCounts
from ..frontdoor.listener import ClientListener
from ..rate_limited_log import RateLimitedLog
from ..tls.peers import mutual_tls, replication_server_context
from . import framing
from .config import ReplicationConfig, ReplicationMode, parse_host_port
from .epoch_file import EpochEntry, EpochFile, consistent_point
from .framing import FrameType, FramingError
from .in_sync import InSyncTracker, NameInUse, ReplicaState
from .liveness import Liveness
from .peer_auth import AuthenticationFailed, prove_to_replica
from .replica_book import ReplicaBook
from .replicated_broker import ReplicatedBroker
from .replicated_metadata import metadata_document

log = logging.getLogger(__name__)


class ReplicationRefused(Exception):
    """A replica's log cannot continue from this master's; the reason says what to do."""


class OverAcknowledged(Exception):
    """A replica acknowledged log bytes it was never sent."""


class _Session:
    """One replica connection."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.wake = asyncio.Event()
        # The end of the log bytes sent on this connection: no ACK may pass it.
        self.sent_end = 0
        # The METADATA document last sent on this connection.
        self.sent_metadata = b""

    def send_metadata(self, document: bytes) -> None:
        """Queue ``document`` unless it is what this replica was sent last."""
        if document != self.sent_metadata:
            self.writer.write(framing.encode(FrameType.METADATA, document))
            self.sent_metadata = document


class ReplicationMaster:
    def __init__(
        self,
        config: ReplicationConfig,
        broker: ReplicatedBroker,
        epochs: EpochFile,
        replica_book: ReplicaBook | None = None,
    ) -> None:
        self.config = config
        self._replica_book = replica_book
        self._broker = broker
        self._store = broker.store
        self._epochs = epochs
        self.tracker = InSyncTracker(
            required=config.sync_replicas,
            max_gap=config.max_gap,
            master_offset=lambda: self._store.commit_log.max_offset,
            heartbeat_timeout=config.heartbeat_timeout,
        )
        self._auth_failures = RateLimitedLog()
        self.timeout = config.sync_timeout
        self.address = ""
        self._listener: ClientListener | None = None
        self._sessions: set[_Session] = set()
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._wake_pending = False
        # Under a Lease: False once the Lease may have passed to another broker.
        self.may_acknowledge: Callable[[], bool] | None = None

    # -- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        host, _ = parse_host_port(self.config.ha_listen, "--ha-listen")
        # Under mutual TLS the handshake runs in the loop's own TLS from a connection's
        # first byte: a TLS upgrade after accepting (start_tls) loses a ClientHello that
        # the stream read before the upgrade, and the handshake then hangs.
        mutual = mutual_tls(self._broker.config.tls)
        limits = self._broker.config.connections
        listener = ClientListener(
            self.config.ha_listen,
            self._stream_protocol,
            tls_context=self._tls_context if mutual else None,
            plaintext=not mutual,
            name="--ha-listen",
            # The first byte and the TLS handshake; replication's own hello has its own
            # timeout. Counted apart from the client ports, so that a flood of clients
            # leaves room for replicas.
            preface_timeout_s=limits.preface_timeout_s,
            accept_pause_s=limits.accept_pause_s,
            counts=ConnectionCounts.of(limits),
            on_failed_handshake=self._failed_handshake,
            on_plaintext_refused=self._plaintext_refused,
        )
        try:
            port = listener.bind()
        except OSError as exc:
            raise OSError(
                f"cannot serve replication on {self.config.ha_listen}: {exc}; "
                "choose another --ha-listen"
            ) from exc
        await listener.start()
        self._listener = listener
        self.address = f"{host}:{port}"
        log.info("serving replication on %s", self.address)
        # Appends by delay and transaction workers are seen when dispatched.
        self._store.add_arrival_listener(lambda _queues: self.appended())

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop_accepting()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if listener is not None:
            await listener.stop()
        # Nothing will be replicated any more: writers still waiting time out.

    async def send_final_metadata(self, timeout_s: float) -> None:
        """On a clean stop, before the Lease is given up: every connected replica is sent
        the state tables as they stand now and the bytes leave this broker (or
        ``timeout_s`` passes), so the replica that takes over has every user, topic and
        offset this master answered for, not only what the last periodic send carried.
        A replica reads METADATA in order, before it can see this connection end."""
        sessions = list(self._sessions)
        if not sessions:
            return
        document = metadata_document(self._broker)
        for session in sessions:
            session.send_metadata(document)
        drained = asyncio.gather(
            *(session.writer.drain() for session in sessions), return_exceptions=True
        )
        try:
            await asyncio.wait_for(drained, timeout_s)
        except TimeoutError:
            log.warning(
                "the state tables did not reach every replica within %.0f s of the stop",
                timeout_s,
            )

    def _stream_protocol(self) -> asyncio.StreamReaderProtocol:
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=1024 * 1024), self._serve)

    def _tls_context(self) -> ssl.SSLContext:
        # Made per connection, so renewed certificate files serve the next replica.
        context = replication_server_context(self._broker.config.tls)
        assert context is not None, "asked for only under mutual TLS"
        return context

    # -- the store's ReplicationGate -----------------------------------------

    def appended(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self._wake_all()
        elif self._loop is not None and not self._wake_pending:
            self._wake_pending = True
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._wake_all)

    def needs_wait(self) -> bool:
        # Under a Lease every write is checked against it just before it is acknowledged.
        return self.config.mode is ReplicationMode.SYNC or self.may_acknowledge is not None

    def _holds_lease(self) -> bool:
        return self.may_acknowledge is None or self.may_acknowledge()

    async def wait_async(self, offset: int) -> bool:
        if self.config.mode is ReplicationMode.SYNC and not await self.tracker.wait_async(
            offset, self.timeout
        ):
            return False
        return self._holds_lease()

    def wait(self, offset: int) -> bool:
        if threading.get_ident() == self._loop_thread:
            # The acknowledgements this would wait for arrive on this very loop, so a
            # blocking write here cannot be confirmed. No write of the broker's is made so
            # (the loop's use put_messages_async; delayed delivery and transaction
            # rollbacks block on their own threads); should one be, it is answered as not
            # replicated, never as confirmed.
            log.error(
                "a blocking write on the event loop cannot wait for SYNC replication; "
                "it is answered as not confirmed by the replicas"
            )
            return False
        if self.config.mode is ReplicationMode.SYNC and not self.tracker.wait(offset, self.timeout):
            return False
        return self._holds_lease()

    def _wake_all(self) -> None:
        self._wake_pending = False
        for session in self._sessions:
            session.wake.set()

    # -- one replica ----------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        state: ReplicaState | None = None
        session = _Session(writer)
        try:
            try:
                await asyncio.wait_for(
                    prove_to_replica(
                        reader, writer, self.config.secret, self._broker.config.broker_name
                    ),
                    self.config.heartbeat_timeout,
                )
            except (AuthenticationFailed, ConnectionError, asyncio.IncompleteReadError) as exc:
                self._log_auth_failure(address, str(exc) or type(exc).__name__)
                return
            except TimeoutError:
                self._log_auth_failure(address, "it did not complete authentication in time")
                return
            hello = await asyncio.wait_for(
                framing.read_frame(reader), self.config.heartbeat_timeout
            )
            if hello.type is not FrameType.HELLO:
                raise FramingError(f"expected HELLO, got {hello.type.name}")
            try:
                name, start = self._handshake(hello.json(), address)
                state = self.tracker.connected(name, address, start)
            except (ReplicationRefused, NameInUse) as exc:
                log.error("refused replica at %s: %s", address, exc)
                writer.write(framing.encode_json(FrameType.REFUSED, {"reason": str(exc)}))
                await writer.drain()
                return
            writer.write(
                framing.encode_json(
                    FrameType.WELCOME,
                    {
                        "start_offset": start,
                        "master_offset": self._store.commit_log.max_offset,
                        "epochs": [e.to_json() for e in self._epochs.entries],
                        "file_size": self._store.config.commit_log_file_size,
                    },
                )
            )
            session.sent_end = start
            log.info(
                "replica %s (%s) connected%s; sending the log from %d",
                name,
                address,
                " over mutual TLS" if mutual_tls(self._broker.config.tls) else "",
                start,
            )
            await self._remember(name, hello.json())
            self._sessions.add(session)
            liveness = Liveness(self.config.heartbeat_timeout)
            acks = asyncio.create_task(self._read_acks(reader, state, session, liveness))
            watchdog = asyncio.create_task(liveness.watch(writer.transport, f"replica {name}"))
            try:
                await self._send_log(writer, session, start, acks)
            finally:
                for task in (acks, watchdog):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError) as exc:
            log.warning("replica %s: connection lost (%s)", state.name if state else address, exc)
        except FramingError as exc:
            log.error("replica at %s sent an invalid frame: %s; dropping it", address, exc)
        except ReplicationRefused as exc:
            log.error("replica at %s: %s; dropping it", address, exc)
        except OverAcknowledged as exc:
            log.error(
                "replica %s at %s %s; dropping it (its acknowledgements count for nothing)",
                state.name if state else "?",
                address,
                exc,
            )
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("replication to %s failed", state.name if state else address)
        finally:
            self._sessions.discard(session)
            if state is not None:
                self.tracker.disconnected(state)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._tasks.discard(task)

    def _failed_handshake(self, address: tuple | None, exc: BaseException) -> None:
        self._log_tls_refusal(address, str(exc) or type(exc).__name__)

    def _plaintext_refused(self, address: tuple | None) -> None:
        self._log_tls_refusal(address, "it did not start a TLS handshake")

    def _log_tls_refusal(self, address: tuple | None, why: str) -> None:
        peer = "an unknown address" if address is None else f"{address[0]}:{address[1]}"
        self._log_refusal(
            peer,
            f"TLS failed ({why}); every broker of the group needs a certificate signed by --tls-ca",
        )

    async def _remember(self, name: str, hello: dict) -> None:
        """Write down where the replica's clients reach it (a failure only loses the note)."""
        endpoint = hello.get("endpoint")
        if self._replica_book is None or not isinstance(endpoint, str) or not endpoint:
            return
        try:
            if await asyncio.to_thread(self._replica_book.remember, name, endpoint):
                log.info("replica %s answers admin calls at %s", name, endpoint)
        except OSError as exc:
            log.warning(
                "cannot record replica %s at %s in %s (%s): started again as master, this "
                "broker will not ask it whether it was promoted; check the data directory",
                name,
                endpoint,
                self._replica_book.path,
                exc,
            )

    def _log_auth_failure(self, address: str, why: str) -> None:
        self._log_refusal(
            address,
            f"it did not authenticate ({why}); every broker of the group needs the same "
            "--ha-secret-file",
        )

    def _log_refusal(self, address: str, reason: str) -> None:
        """One rate-limited line for a replica turned away: why, and what to fix."""
        line = self._auth_failures.line(
            f"refused a replication connection from {address}: {reason}"
        )
        if line is not None:
            log.error("%s", line)

    def _handshake(self, hello: dict, address: str) -> tuple[str, int]:
        """The replica's name and the offset its copy continues from."""
        name = str(hello.get("replica") or address)
        file_size = self._store.config.commit_log_file_size
        if hello.get("file_size") != file_size:
            raise ReplicationRefused(
                f"the replica's commit-log segments are {hello.get('file_size')} bytes, the "
                f"master's {file_size}; run both with the same --commit-log-file-size"
            )
        try:
            replica_offset = int(hello["max_offset"])
            replica_epochs = [EpochEntry.from_json(e) for e in hello.get("epochs", [])]
        except (KeyError, TypeError, ValueError) as exc:
            raise FramingError(f"bad HELLO: {exc}") from None
        master_offset = self._store.commit_log.max_offset
        point = consistent_point(
            replica_epochs, replica_offset, self._epochs.entries, master_offset
        )
        if point is None:
            raise ReplicationRefused(
                "the replica's log shares no master term with this master's; empty the "
                "replica's data directory so that it copies the log from the start"
            )
        min_offset = self._store.commit_log.min_offset
        if point < min_offset:
            if replica_offset > 0:
                raise ReplicationRefused(
                    f"the replica stops at {point}, but the master keeps its log only from "
                    f"{min_offset}; empty the replica's data directory to copy it afresh"
                )
            point = min_offset
        return name, point

    async def _read_acks(
        self,
        reader: asyncio.StreamReader,
        state: ReplicaState,
        session: _Session,
        liveness: Liveness,
    ) -> None:
        while True:
            frame = await framing.read_frame(reader)
            liveness.heard()
            if frame.type is not FrameType.ACK:
                raise FramingError(f"expected ACK, got {frame.type.name}")
            offset = frame.offset()
            if offset > session.sent_end:
                raise OverAcknowledged(
                    f"acknowledged offset {offset}, but was sent the log only up to "
                    f"{session.sent_end}"
                )
            self.tracker.acked(state, offset)

    async def _send_log(
        self,
        writer: asyncio.StreamWriter,
        session: _Session,
        position: int,
        acks: asyncio.Task,
    ) -> None:
        commit_log = self._store.commit_log
        batch = self.config.transfer_batch_bytes
        last_sent = time.monotonic()
        metadata_at = 0.0
        while not acks.done():
            now = time.monotonic()
            if now - metadata_at >= self.config.metadata_interval:
                metadata_at = now
                session.send_metadata(metadata_document(self._broker))
            end = commit_log.max_offset
            if position < end:
                got = commit_log.read_segment_tail(position, min(batch, end - position))
                if got is None or not got[1]:
                    raise ReplicationRefused(
                        f"the log at {position} is no longer stored (deleted by retention)"
                    )
                data = got[1]
                # One write, so one send() for a small run.
                writer.write(framing.data_header(end, position, len(data)) + data)
                position += len(data)
                session.sent_end = position
                last_sent = now
                await writer.drain()
                continue
            session.wake.clear()
            idle = self.config.heartbeat_interval - (time.monotonic() - last_sent)
            if idle <= 0:
                writer.write(framing.encode_offset(FrameType.HEARTBEAT, end))
                await writer.drain()
                last_sent = time.monotonic()
                continue
            wait = min(idle, self.config.metadata_interval)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await session.wake.wait()
        # The ack reader ended: surface why.
        acks.result()
