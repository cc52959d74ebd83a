"""A replica's side of replication: follow the master's commit log byte for byte.

The client connects to the master's replication address (over mutual TLS with
--tls-ca and a certificate, :mod:`..tls.peers`), and both prove they
hold the group's secret (:mod:`.peer_auth`): a master that cannot prove it is
told nothing and has nothing written. Then the client says how far its log goes,
which master terms it holds and where its own clients reach it. The master
answers where the copy continues; a replica that holds bytes the master never
had (it followed an earlier master further than the new one got) first cuts its
log back to that point, with the store's recovery truncation. Then it writes
each DATA run into its own commit log at the same offset and acknowledges the
new end, never past the last byte the master sent on this connection (the
padding of a BLANK record written ahead of its bytes is acknowledged as they
arrive). Its own dispatcher builds consume queues and index, so consumers can
read here. Topics, consumer offsets, users and ACLs come in METADATA frames and
replace this broker's own (a master too old to send users leaves them as they are).

An ACK is also the replica's heartbeat: one goes out at least every heartbeat
interval. A master not heard from within the heartbeat timeout is taken for
dead; the client reconnects every second until it answers again.

Nothing the master sends is written unchecked: every record of a DATA run
passes ``wire.record_check`` (with its physical offset) before any byte of
the run reaches the log. A run may end inside a record (the master sends
byte ranges); that record's bytes wait for the rest. A BLANK record's padding
is written here, up to the segment's end, so the log never ends inside one.
A record that fails its check writes nothing: the connection is dropped, the
problem logged as an ERROR naming the master, and the copy retried later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time

from ..tls.peers import PEER_NAME, mutual_tls, replication_client_context
from ..wire.record_check import check_run, is_blank
from ..wire.record_layout import SIZE_MAGIC
from . import framing
from .config import ReplicationConfig, parse_host_port
from .epoch_file import EpochEntry, EpochFile
from .framing import FrameType, FramingError
from .liveness import Liveness
from .peer_auth import AuthenticationFailed, prove_to_master
from .replicated_broker import ReplicatedBroker
from .replicated_metadata import apply_metadata

log = logging.getLogger(__name__)

RECONNECT_DELAY_S = 1.0
# A master that refused this replica is asked again this much later.
REFUSED_RETRY_S = 10.0
# Failed connection attempts in a row between two log lines about them.
_QUIET_RETRIES = 60
# A BLANK record's padding is written in pieces of at most this many bytes.
_PADDING_CHUNK = 4 * 1024 * 1024


class ReplicaClient:
    def __init__(
        self,
        config: ReplicationConfig,
        broker: ReplicatedBroker,
        epochs: EpochFile,
        name: str,
        *,
        endpoint: str = "",
    ) -> None:
        """``endpoint``: where this broker's clients reach it, told to the master."""
        self.config = config
        self.endpoint = endpoint
        self._broker = broker
        self._store = broker.store
        self._epochs = epochs
        self.name = name
        # The master's end of log as last heard (-1: never heard from it).
        self.master_offset = -1
        self.connected = False
        self.last_heard = 0.0
        self._pending_epochs: list[EpochEntry] = []
        self._task: asyncio.Task | None = None
        # The start of a record cut by the end of the last DATA run, and its log offset.
        self._partial = b""
        self._partial_at = -1
        # Padding the master still sends for a BLANK record this replica already wrote.
        self._padded_until = -1
        # The end of the log bytes the master sent on this connection: ACKs stop there.
        self._received_end = 0

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="replica-client")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.connected = False

    @property
    def lag_bytes(self) -> int:
        if self.master_offset < 0:
            return -1
        return max(0, self.master_offset - self._store.commit_log.max_offset)

    @property
    def highest_epoch_seen(self) -> int:
        """The newest master term this replica heard of, reached by its log or not."""
        return max((e.epoch for e in self._pending_epochs), default=0)

    def in_sync(self) -> bool:
        """As of the last word from the master: within the gap of its log."""
        return 0 <= self.lag_bytes <= self.config.max_gap

    # -- following the master -------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while True:
            delay = RECONNECT_DELAY_S
            try:
                await self._session()
            except _Refused as exc:
                log.error("master %s refused this replica: %s", self.config.master_address, exc)
                delay = REFUSED_RETRY_S
            except AuthenticationFailed as exc:
                log.error(
                    "master %s did not authenticate: %s; asking again in %g s (every broker "
                    "of the group needs the same --ha-secret-file%s)",
                    self.config.master_address,
                    exc,
                    REFUSED_RETRY_S,
                    # Under TLS 1.3 a master refusing this certificate closes only then.
                    ", and over mutual TLS a --tls-cert signed by the master's --tls-ca"
                    if mutual_tls(self._broker.config.tls)
                    else "",
                )
                delay = REFUSED_RETRY_S
            except ssl.SSLError as exc:
                log.error(
                    "TLS with master %s failed: %s; asking again in %g s (every broker of "
                    "the group needs a certificate signed by the same --tls-ca, carrying the "
                    "DNS name %s)",
                    self.config.master_address,
                    exc,
                    REFUSED_RETRY_S,
                    PEER_NAME,
                )
                delay = REFUSED_RETRY_S
            except BadReplicatedRecord as exc:
                log.error(
                    "master %s sent a record that fails its check, so nothing of that run was "
                    "written: %s; asking again in %g s (if it persists, check the master's "
                    "commit log with skiff store check)",
                    self.config.master_address,
                    exc,
                    REFUSED_RETRY_S,
                )
                delay = REFUSED_RETRY_S
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                failures = 1 if self.connected else failures + 1
                # The first failure, then one a minute while the master stays away.
                if failures % _QUIET_RETRIES == 1:
                    log.warning(
                        "replication from %s interrupted: %s; reconnecting every %g s",
                        self.config.master_address,
                        exc or type(exc).__name__,
                        RECONNECT_DELAY_S,
                    )
            except FramingError as exc:
                log.error("master %s sent an invalid frame: %s", self.config.master_address, exc)
            except Exception:
                # Keep following: a replica that stopped retrying would fall behind for good.
                log.exception("replication from %s failed", self.config.master_address)
            finally:
                self.connected = False
            await asyncio.sleep(delay)

    async def _session(self) -> None:
        host, port = parse_host_port(self.config.master_address, "--master-address")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=4 * 1024 * 1024),
            self.config.heartbeat_timeout,
        )
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        heartbeats: list[asyncio.Task] = []
        try:
            # Made per connection, so renewed certificate files serve the next one.
            context = replication_client_context(self._broker.config.tls)
            if context is not None:
                await writer.start_tls(
                    context,
                    server_hostname=PEER_NAME,
                    ssl_handshake_timeout=self.config.heartbeat_timeout,
                )
            store = self._store
            await asyncio.wait_for(
                prove_to_master(
                    reader, writer, self.config.secret, self._broker.config.broker_name
                ),
                self.config.heartbeat_timeout,
            )
            writer.write(
                framing.encode_json(
                    FrameType.HELLO,
                    {
                        "replica": self.name,
                        "endpoint": self.endpoint,
                        "max_offset": store.commit_log.queue.max_wrote_offset,
                        "epochs": [e.to_json() for e in self._epochs.entries],
                        "file_size": store.config.commit_log_file_size,
                    },
                )
            )
            await writer.drain()
            reply = await asyncio.wait_for(
                framing.read_frame(reader), self.config.heartbeat_timeout
            )
            if reply.type is FrameType.REFUSED:
                raise _Refused(str(reply.json().get("reason", "no reason given")))
            if reply.type is not FrameType.WELCOME:
                raise FramingError(f"expected WELCOME, got {reply.type.name}")
            start = self._welcome(reply.json())
            self._partial, self._partial_at, self._padded_until = b"", -1, -1
            self._received_end = start
            self.connected = True
            self._heard()
            log.info(
                "following master %s from %d (its log ends at %d)",
                self.config.master_address,
                store.commit_log.queue.max_wrote_offset,
                self.master_offset,
            )
            writer.write(framing.encode_offset(FrameType.ACK, self._acknowledgeable()))
            liveness = Liveness(self.config.heartbeat_timeout)
            heartbeats = [
                asyncio.create_task(self._send_heartbeats(writer)),
                asyncio.create_task(
                    liveness.watch(writer.transport, f"master {self.config.master_address}")
                ),
            ]
            await self._receive(reader, writer, liveness)
        finally:
            for task in heartbeats:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _welcome(self, welcome: dict) -> int:
        """Cut the log back where the master continues; that offset."""
        try:
            start = int(welcome["start_offset"])
            self.master_offset = int(welcome["master_offset"])
            master_epochs = [EpochEntry.from_json(e) for e in welcome["epochs"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise FramingError(f"bad WELCOME: {exc}") from None
        store = self._store
        master_epoch = max((e.epoch for e in master_epochs), default=0)
        if master_epoch < self._epochs.epoch:
            # This broker was master in a later term: its log is the newer one.
            raise _Refused(
                f"master {self.config.master_address} is at epoch {master_epoch}, older than "
                f"this broker's epoch {self._epochs.epoch}, so following it would cut writes "
                "this broker acknowledged as master; nothing was cut. Make "
                f"{self.config.master_address} a replica of this broker instead, or empty this "
                "broker's data directory if its log is to be given up"
            )
        end = store.commit_log.queue.max_wrote_offset
        last = master_epochs[-1] if master_epochs else None
        # A master is never behind a replica in the term it is writing: both brokers
        # were master under the same epoch number.
        if (
            end > start
            and last is not None
            and last.start_offset <= start
            and last in self._epochs.entries
        ):
            raise _Refused(
                f"this broker's log goes {end - start} bytes past master "
                f"{self.config.master_address}'s in their shared epoch {last.epoch}, so "
                "both were master in that epoch; nothing was cut. Make "
                f"{self.config.master_address} a replica of this broker instead, or empty "
                "this broker's data directory if its log is to be given up"
            )
        if end > start:
            log.warning(
                "this replica's log diverged from master %s at %d: cutting %d bytes it "
                "never acknowledged",
                self.config.master_address,
                start,
                end - start,
            )
            store.truncate_to(start)
            self._epochs.truncate_after(start)
        elif end < start and end != 0:
            raise _Refused(f"master continues at {start}, but this log ends at {end}")
        # Terms are recorded once the copied log reaches them.
        self._pending_epochs = master_epochs
        self._record_epochs(start)
        return start

    def _acknowledgeable(self) -> int:
        """The log's end, but never past what the master sent on this connection."""
        return min(self._store.commit_log.queue.max_wrote_offset, self._received_end)

    def _record_epochs(self, end: int) -> None:
        reached = [e for e in self._pending_epochs if e.start_offset <= end]
        if reached != self._epochs.entries:
            self._epochs.replace(reached)

    def _heard(self) -> None:
        self.last_heard = time.monotonic()

    async def _receive(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, liveness: Liveness
    ) -> None:
        pending_epoch_start = self._next_epoch_start()
        while True:
            frame = await framing.read_frame(reader)
            liveness.heard()
            self.last_heard = liveness.last_heard
            if frame.type is FrameType.DATA:
                master_offset, offset, data = frame.data()
                self.master_offset = master_offset
                self._received_end = max(self._received_end, offset + len(data))
                try:
                    end = self._append_checked(offset, data)
                except ValueError as exc:
                    raise FramingError(str(exc)) from None
                if end >= pending_epoch_start:
                    self._record_epochs(end)
                    pending_epoch_start = self._next_epoch_start()
                writer.write(framing.encode_offset(FrameType.ACK, min(end, self._received_end)))
                if writer.transport.get_write_buffer_size() > 64 * 1024:
                    await writer.drain()
            elif frame.type is FrameType.HEARTBEAT:
                self.master_offset = frame.offset()
            elif frame.type is FrameType.METADATA:
                apply_metadata(self._broker, frame.json(), self.config.master_address)
            else:
                raise FramingError(f"unexpected {frame.type.name} frame")

    def _append_checked(self, offset: int, data: bytes | memoryview) -> int:
        """Write the whole, checked records of a DATA run at ``offset``; returns the log's end.

        Raises BadReplicatedRecord (nothing of the run written) if a record fails
        its check, ValueError if the run does not continue where the log ends.
        """
        store = self._store
        if self._padded_until > offset:
            skipped = min(len(data), self._padded_until - offset)
            offset += skipped
            data = data[skipped:]
        if self._partial:
            if offset != self._partial_at + len(self._partial):
                raise ValueError(
                    f"replicated bytes start at {offset}, but the record begun at "
                    f"{self._partial_at} continues at {self._partial_at + len(self._partial)}"
                )
            data = self._partial + bytes(data)
            offset = self._partial_at
        if not data:
            return store.commit_log.queue.max_wrote_offset
        whole, padding = self._checked_prefix(offset, data)
        end = offset
        if whole:
            end = store.append_replicated(offset, memoryview(data)[:whole])
        self._partial = bytes(data[whole:])
        self._partial_at = offset + whole
        if padding:
            while padding:
                chunk = min(padding, _PADDING_CHUNK)
                end = store.append_replicated(end, bytes(chunk))
                padding -= chunk
            self._padded_until = end
            self._partial, self._partial_at = b"", -1
        return end

    def _checked_prefix(self, offset: int, data: bytes | memoryview) -> tuple[int, int]:
        """How many leading bytes of ``data`` are whole checked records (or a BLANK's head).

        Also the padding this replica writes after a BLANK record's head, up to
        its segment's end (0 if none).
        """
        file_size = self._store.config.commit_log_file_size
        segment_end = (offset // file_size + 1) * file_size - offset
        end = len(data)
        checked = check_run(data, 0, end, base=offset)
        problem = checked.problem
        stop = checked.stop
        if problem is None:
            return end, 0
        if is_blank(data, stop, end, segment_end):
            return stop + 8, segment_end - stop - 8
        if problem.incomplete:
            claimed = SIZE_MAGIC.unpack_from(data, stop)[0] if stop + 8 <= end else 8
            if stop + claimed <= segment_end:
                return stop, 0
        raise BadReplicatedRecord(str(problem))

    def _next_epoch_start(self) -> int:
        held = len(self._epochs.entries)
        pending = self._pending_epochs[held:] if len(self._pending_epochs) > held else []
        return pending[0].start_offset if pending else 2**63 - 1

    async def _send_heartbeats(self, writer: asyncio.StreamWriter) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_interval)
            writer.write(framing.encode_offset(FrameType.ACK, self._acknowledgeable()))
            await writer.drain()


class _Refused(Exception):
    pass


class BadReplicatedRecord(Exception):
    """A record from the master that fails wire's check: nothing of its run is written."""
