"""The broker process: recover the store, open every door, stop cleanly on a signal.

The composition root: the one module that knows every part. It builds the store, the
services and the doors from one ``BrokerConfig`` and hands each the parts it uses.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
from collections.abc import Callable, Sequence

import grpc

from ..admin.service import AdminService
from ..admin.service import add_to_server as add_admin_service
from ..auth.gate import AuthGate, may
from ..auth.model import parse_user_spec
from ..auth.rights import transaction_check_needs
from ..client.credentials import Credentials, signing_interceptors
from ..cluster.kube_client import KubeClient, KubeError
from ..cluster.lease_elector import LeaseElector
from ..cluster.routes import ClusterRoutes
from ..config import BrokerConfig
from ..delivery.long_polling import ArrivalHub
from ..frontdoor.connection_limits import ConnectionCounts
from ..frontdoor.grpc.server import RpcServer
from ..frontdoor.http2.receive_budget import ReceiveBudget
from ..frontdoor.listener import ClientListener
from ..ha.config import Role
from ..ha.replication import Replication
from ..messaging.clients import ClientSession
from ..messaging.messaging_service import MessagingService, add_to_server
from ..messaging.sending import transaction_check_sender
from ..records.service import RecordService
from ..records.service import add_to_server as add_record_service
from ..remoting.server import RemotingServer
from ..runtime import Broker
from ..telemetry import conventions as cv
from ..telemetry import telemetry_from_env
from ..tls.certificates import ReloadingCertificate, names_to_cover, self_signed
from ..tls.peers import check_carries_peer_name, peer_client_tls
from ..tls.settings import TlsMode
from .health import BrokerHealth
from .slow_callbacks import report_slow_callbacks

log = logging.getLogger(__name__)

# Requests up to this many times the message size limit reach the broker, which
# answers MESSAGE_BODY_TOO_LARGE; larger ones are refused by the server itself.
_INBOUND_LIMIT_FACTOR = 4
_INBOUND_LIMIT_MIN = 16 * 1024 * 1024
# Open RPCs per connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): bounds the long
# polls and streams one client can keep waiting; further calls wait in the client.
MAX_CONCURRENT_STREAMS = 1000
# Allocations between two collections of the youngest generation while serving.
GC_YOUNG_THRESHOLD = 50_000


class BrokerServer:
    def __init__(self, config: BrokerConfig) -> None:
        config.validate()
        self.config = config
        # From the OTEL_* variables and --metrics-listen; off (and free) with neither.
        self.telemetry = telemetry_from_env(
            config.broker_name,
            replication_mode=str(config.replication.mode),
            metrics_listen=config.metrics_listen,
        )
        self.broker = Broker(config, observer=self.telemetry.store_observer())
        # Pods of one group share the broker name: the pod tells them apart.
        node_id = (
            config.cluster.pod_name if config.replication.role is Role.LEASE else ""
        ) or config.broker_name
        self.traffic = self.telemetry.traffic_observer(
            cluster=config.cluster.name or cv.DEFAULT_CLUSTER,
            node_id=node_id,
            backlog=self.broker.consumer_backlog,
            sessions=self._session_counts,
        )
        self.health = BrokerHealth()
        self.metrics_port = 0
        self.under_lease = config.replication.role is Role.LEASE
        self.replication = Replication(
            config.replication, self.broker, name=self._replica_name, endpoint=self.client_endpoint
        )
        self.messaging: MessagingService | None = None
        # Forgets the sessions of clients that left (``ClientRegistry.expire``).
        self._session_expiry: asyncio.Task[None] | None = None
        self.remoting: RemotingServer | None = None
        self.port = 0
        self.external_port = 0
        self._servers: list[RpcServer] = []
        # The client port(s): each hands its connections to its server.
        self._listeners: list[ClientListener] = []
        # Shared by the client port and the external one: the limits are the broker's.
        self._connection_counts = ConnectionCounts.of(config.connections)
        self.certificate: ReloadingCertificate | None = None
        cluster = config.cluster
        self.kube: KubeClient | None = None
        self.elector: LeaseElector | None = None
        if self.under_lease:
            try:
                self.kube = KubeClient.from_environment(cluster.kubeconfig)
            except KubeError as exc:
                raise OSError(str(exc)) from None
            self.elector = LeaseElector(
                self.kube,
                cluster,
                config.broker_name,
                self.replication,
                self.client_endpoint,
                remoting_endpoint=self.remoting_endpoint,
            )
        self.routes: ClusterRoutes | None = None
        if self.under_lease or cluster.peers:
            self.routes = ClusterRoutes(
                cluster,
                config.broker_name,
                is_master=lambda: (
                    self.replication.role is Role.MASTER and not self.broker.is_replica
                ),
                elector=self.elector,
                api=self.kube,
                peer_interceptors=self._peer_signing(),
                peer_tls=peer_client_tls(config.tls),
            )

    def _peer_signing(self) -> Sequence[grpc.aio.ClientInterceptor]:
        """Calls to other groups sign as the bootstrap super user, which every broker has."""
        auth = self.config.auth
        if not auth.enabled:
            return ()
        if not auth.init_user:
            log.warning(
                "authentication is on without --auth-init-user: other groups refuse this "
                "broker's topic look-ups, so routes list only its own queues; give every "
                "broker of the cluster the same --auth-init-user"
            )
            return ()
        user = parse_user_spec(auth.init_user)
        return signing_interceptors(Credentials(user.access_key, user.secret_key))

    @property
    def address(self) -> str:
        host = self.config.listen.rpartition(":")[0]
        return f"{host}:{self.port}"

    def _replica_name(self) -> str:
        """How a master tells its replicas apart, the same across restarts."""
        if self.under_lease:
            # The Lease lists in-sync replicas by pod, and where clients can read from them.
            return f"{self.config.cluster.pod_name}@{self.client_endpoint()}"
        if self.config.advertised_endpoint:
            return f"{self.config.broker_name}@{self.config.advertised_endpoint}"
        return f"{self.config.broker_name}@{socket.gethostname()}:{self.config.store.data_dir}"

    def client_endpoint(self) -> str:
        """Where clients reach this broker: the advertised address, else the listen address."""
        if self.config.advertised_endpoint:
            return self.config.advertised_endpoint
        host = self.config.listen.rpartition(":")[0]
        if host in ("", "0.0.0.0", "[::]", "::"):
            host = socket.gethostname()
        return f"{host}:{self.port}"

    def remoting_endpoint(self) -> str:
        """Where 4.x clients reach this broker's remoting port; empty while it has none."""
        return self.remoting.endpoint if self.remoting is not None and self.remoting.port else ""

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # Recovery can scan a lot of log; nothing else runs on the loop yet.
        self.replication.load()
        self.broker.start(replica=self.replication.is_replica)
        hub = ArrivalHub(loop)
        self.broker.store.add_arrival_listener(hub.on_arrival)
        self.messaging = MessagingService(
            self.broker, hub, cluster=self.routes, traffic=self.traffic
        )
        self._session_expiry = asyncio.create_task(
            self.messaging.clients.expire_periodically(), name="client session expiry"
        )
        # Unresolved transactions are checked with producers over their telemetry streams;
        # with authentication on, only with those whose user may publish to the topic.
        self.broker.transactions.send_check = transaction_check_sender(
            self.messaging.clients,
            loop,
            may_be_asked=self._may_be_asked if self.config.auth.enabled else None,
        )
        inbound = max(
            _INBOUND_LIMIT_MIN, _INBOUND_LIMIT_FACTOR * self.config.store.max_message_size
        )
        # Every service on every port is behind the same gate when authentication is on.
        interceptors = (
            [AuthGate(self.broker.users, max_skew_s=self.config.auth.max_clock_skew_s)]
            if self.config.auth.enabled
            else []
        )
        # One budget for request data across every client port's connections.
        per_connection, total = self.config.request_buffers.in_effect(inbound)
        self._request_buffer = ReceiveBudget(total)
        self._buffer_per_connection = per_connection
        server = self._server_with_every_service(self.messaging, hub, interceptors, inbound)
        await self.health.starting()
        external = None
        if self.config.cluster.external_listen:
            # Same services; its routes carry the groups' external addresses.
            external_messaging = MessagingService(
                self.broker,
                hub,
                cluster=self.routes,
                external=True,
                clients=self.messaging.clients,
                traffic=self.traffic,
            )
            external = self._server_with_every_service(
                external_messaging, hub, interceptors, inbound
            )
        try:
            try:
                check_carries_peer_name(self.config.tls)
            except ValueError as exc:
                raise OSError(str(exc)) from None
            if self.config.tls.mode is not TlsMode.DISABLED:
                self.certificate = self._load_certificate()
            self.port = self._open_client_port(server, self.config.listen, "--listen")
            if external is not None:
                self.external_port = self._open_client_port(
                    external, self.config.cluster.external_listen, "--external-listen"
                )
            if self.config.remoting_enabled:
                self.remoting = RemotingServer(
                    self.broker,
                    hub,
                    budget=self._request_buffer,
                    per_connection=self._buffer_per_connection,
                    counts=self._connection_counts,
                    tls_context=(
                        self.certificate.ssl_context if self.certificate is not None else None
                    ),
                    plaintext=self.config.tls.mode is not TlsMode.ENFORCING,
                    cluster=self.routes,
                )
                self.remoting.bind()
                # 4.x producers are asked over their remoting connections, others as before.
                self.broker.transactions.send_check = self.remoting.transactions.check_sender(
                    self.broker.transactions.send_check, loop
                )
            await self.replication.start()
            self.metrics_port = self.telemetry.start_metrics_endpoint()
        except OSError:
            for listener in self._listeners:
                listener.stop_accepting()
            self._session_expiry.cancel()
            if self.remoting is not None:
                self.remoting.stop_accepting()
            self.broker.stop()
            self.telemetry.shutdown()
            raise
        self._servers = [server] if external is None else [server, external]
        for listener in self._listeners:
            await listener.start()
        if self.remoting is not None:
            await self.remoting.start()
            # Before "listening on": tests and tools read the port from this line.
            log.info("remoting clients on %s", self.remoting.address)
            if self.remoting.external_port:
                log.info("external remoting clients on port %d", self.remoting.external_port)
        if external is not None:
            log.info("external clients on port %d", self.external_port)
        if self.elector is not None:
            self.elector.start()
        await self.health.serving()
        log.info("listening on %s", self.address)
        if self.certificate is not None:
            log.info(
                "TLS %s on the client port, certificate %s",
                self.config.tls.mode,
                self.certificate.cert_file,
            )

    def _session_counts(self) -> dict[str, int]:
        """Client sessions remembered, by client type (read by the metrics)."""
        return self.messaging.clients.counts_by_type() if self.messaging is not None else {}

    def _may_be_asked(self, session: ClientSession, topic: str) -> bool:
        """Whether the session's user may, now, be sent ``topic``'s transaction checks."""
        needs = transaction_check_needs(topic)
        return may(self.broker.users, session.owner, needs, session.peer)

    def _server_with_every_service(
        self,
        messaging: MessagingService,
        hub: ArrivalHub,
        interceptors: Sequence[grpc.aio.ServerInterceptor],
        inbound: int,
    ) -> RpcServer:
        """A gRPC server with every service of the broker; ``messaging`` hands out its routes."""
        call_context = self.telemetry.call_context()
        server = RpcServer(
            interceptors=interceptors,
            max_message=inbound,
            max_concurrent_streams=MAX_CONCURRENT_STREAMS,
            call_context=call_context,
            idle_timeout_s=self.config.connections.idle_timeout_s,
            buffer_per_connection=self._buffer_per_connection,
            buffer_budget=self._request_buffer,
            message_timeout=self.config.request_buffers.message_timeout_s,
        )
        # RocketMQ RPCs and record appends and fetches get SERVER spans (their calls start
        # in the unsampled context: a store append under an untraced call is never
        # sampled); the admin service's rare calls go untraced.
        trace = self.telemetry.handler_tracer(call_context)
        add_to_server(messaging, server, trace=trace)
        add_admin_service(
            AdminService(
                self.broker,
                endpoint=self.client_endpoint,
                replication=self.replication,
                clients=messaging.clients,
                remoting_endpoint=self.remoting_endpoint,
            ),
            server,
        )
        add_record_service(RecordService(self.broker, hub, self.traffic), server, trace=trace)
        # Probes reach it on the client port, like any client.
        self.health.add_to_server(server)
        return server

    def _load_certificate(self) -> ReloadingCertificate:
        tls = self.config.tls
        if tls.cert_file:
            try:
                return ReloadingCertificate(tls.cert_file, tls.key_file)
            except (OSError, ValueError) as exc:
                raise OSError(
                    f"cannot use the TLS certificate {tls.cert_file} with key {tls.key_file}: "
                    f"{exc}; check --tls-cert and --tls-key (PEM files)"
                ) from None
        names = names_to_cover(
            self.config.advertised_endpoint,
            self.config.remoting_advertise,
            self.config.listen,
            self.config.cluster.external_listen,
            *([self.config.remoting_listen] if self.config.remoting_enabled else []),
            self.config.remoting_external_listen,
        )
        cert_file, key_file = self_signed(self.config.store.data_dir, names)
        return ReloadingCertificate(cert_file, key_file)

    def _open_client_port(self, server: RpcServer, listen: str, option: str) -> int:
        """The port clients reach ``server`` at; TLS and plaintext as the mode says."""
        certificate = self.certificate
        listener = ClientListener(
            listen,
            server.protocol,
            tls_context=certificate.ssl_context if certificate is not None else None,
            plaintext=self.config.tls.mode is not TlsMode.ENFORCING,
            name=option,
            preface_timeout_s=self.config.connections.preface_timeout_s,
            accept_pause_s=self.config.connections.accept_pause_s,
            counts=self._connection_counts,
        )
        self._listeners.append(listener)
        return listener.bind()

    async def stop(self, grace: float = 5.0) -> None:
        # Probes see it first: the pod leaves its Service's endpoints while calls drain.
        await self.health.stopping()
        # No new connections; those open are told to go (GOAWAY), their calls get
        # ``grace`` to finish, then the rest are cancelled.
        for listener in self._listeners:
            listener.stop_accepting()
        if self.remoting is not None:
            await self.remoting.stop()
            self.remoting = None
        await asyncio.gather(*(server.stop(grace) for server in self._servers))
        for listener in self._listeners:
            await listener.stop()
        self._listeners = []
        self._servers = []
        # No writes arrive any more: the replicas take the state tables as they stand
        # (users and topics applied within the last metadata interval included), then
        # the Lease can pass to an in-sync replica at once.
        await self.replication.hand_over()
        if self.elector is not None:
            await self.elector.stop()
        if self.routes is not None:
            await self.routes.close()
        await self.replication.stop()
        if self._session_expiry is not None:
            self._session_expiry.cancel()
        self.broker.stop()
        # Last: spans of the final flushes are exported too.
        self.telemetry.shutdown()

    async def serve_until_signalled(self, on_listening: Callable[[], None] | None = None) -> None:
        """Serve until SIGTERM or SIGINT; ``on_listening`` runs once the ports are open."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        report_slow_callbacks(loop, self.config.slow_callback_report_ms)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await self.start()
        # What was built to start (modules, the store's tables, the servers) lives as long
        # as the broker: out of the collector's way, its full passes scan only what serving
        # creates.
        gc.freeze()
        # The youngest generation is collected every GC_YOUNG_THRESHOLD allocations, not
        # Python's 700: with hundreds of requests open, each pass at 700 scanned their live
        # objects again and promoted them, and older passes followed.
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        if on_listening is not None:
            on_listening()
        await stop.wait()
        log.info("stopping")
        await self.stop()
