"""apache.rocketmq.v2.MessagingService: each RPC checks its input and delegates.

Heartbeat, Telemetry and NotifyClientTermination act on the session of the caller's
own identity (the access key that signed the call, "" with authentication off) and
the client id it names: see ``clients``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from ..auth.caller import signed_by
from ..cluster.routes import ClusterRoutes
from ..delivery.long_polling import ArrivalHub
from ..endpoints import endpoints_of
from ..frontdoor.grpc.boundary import Answer, rpc_boundary, rpc_stream_boundary
from ..frontdoor.grpc.call import ServerCall
from ..frontdoor.grpc.peers import peer_host
from ..frontdoor.grpc.server import RpcServer
from ..frontdoor.grpc.undecodable import Undecodable, lenient_rpc_handler
from ..frontdoor.grpc.undecodable import refuse as _refuse
from ..metadata.topic_table import TopicConfig
from ..runtime import Broker
from ..telemetry.traffic import NO_TRAFFIC, TrafficObserver
from . import routing
from .clients import ClientRegistry, TelemetryOutbox
from .pulling import Puller
from .receiving import Receiver
from .sending import Sender
from .status import OK, Code, RequestError, status

log = logging.getLogger(__name__)

_SERVICE = spb.DESCRIPTOR.services_by_name["MessagingService"]
# Clients whose heartbeat names a consumer group, checked as RocketMQ's proxy checks it.
_CONSUMER_TYPES = frozenset({pb.ClientType.PUSH_CONSUMER, pb.ClientType.SIMPLE_CONSUMER})


def _check_settings_names(settings: pb.Settings) -> None:
    """The names a client's Settings give: published topics, the subscription's group."""
    if settings.HasField("publishing"):
        for topic in settings.publishing.topics:
            routing.require_topic_name(topic.name)
    if settings.HasField("subscription"):
        routing.require_group_name(settings.subscription.group.name)


def add_to_server(
    service: MessagingService,
    server: RpcServer,
    *,
    trace: Callable[[grpc.RpcMethodHandler, str], grpc.RpcMethodHandler] | None = None,
) -> None:
    """Register ``service`` like the generated ``add_MessagingServiceServicer_to_server``,
    except that undecodable requests reach the handlers as ``Undecodable``.

    ``trace`` wraps each method's handler (given its path) once.
    """
    server.add_generic_rpc_handlers(
        (
            lenient_rpc_handler(
                _SERVICE,
                service,
                spb,
                hint="send it with the apache.rocketmq.v2 protobuf definitions",
                trace=trace,
            ),
        )
    )


async def _ready(value: TopicConfig | None) -> TopicConfig | None:
    return value


def metadata_value(context: ServerCall, key: str) -> str:
    return context.metadata_value(key) or ""


def _owner() -> str:
    """Whose sessions the current call may use: its signer's; "" with authentication off."""
    return signed_by() or ""


def _status_answer(response_type: type) -> Answer:
    """Answer a RequestError, or an unexpected error, as a response with that status."""

    async def answer(context: grpc.aio.ServicerContext, error: Exception) -> object:
        if isinstance(error, RequestError):
            return response_type(status=error.to_status())
        return response_type(status=status(Code.INTERNAL_SERVER_ERROR, str(error)))

    return answer


def _unary(response_type: type) -> Callable:
    return rpc_boundary(_status_answer(response_type), expected=(RequestError,))


def _stream(response_type: type) -> Callable:
    return rpc_stream_boundary(_status_answer(response_type))


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(
        self,
        broker: Broker,
        hub: ArrivalHub,
        *,
        cluster: ClusterRoutes | None = None,
        external: bool = False,
        clients: ClientRegistry | None = None,
        traffic: TrafficObserver = NO_TRAFFIC,
    ) -> None:
        self._broker = broker
        self._clients = clients or ClientRegistry(
            broker.config, broker.topics, broker.group_settings
        )
        # ``traffic`` hears of the messages stored and delivered (metrics).
        self._sender = Sender(broker, traffic)
        self._receiver = Receiver(broker, hub, traffic)
        self._puller = Puller(broker, hub, traffic)
        # Routes name every group of the cluster; ``external``: this is the external port.
        self._cluster = cluster
        self._external = external

    @property
    def clients(self) -> ClientRegistry:
        return self._clients

    def _endpoints(self, requested: pb.Endpoints) -> pb.Endpoints:
        """Where clients should send RPCs for this broker."""
        advertised = self._broker.config.advertised_endpoint
        if advertised and not self._external:
            return endpoints_of(advertised)
        if requested.addresses:
            # The address the client reached us at is one it can reach again.
            return requested
        return endpoints_of(self._broker.config.listen)

    async def _groups_with_topic(
        self, name: str, requested: pb.Endpoints
    ) -> list[tuple[str, pb.Endpoints, TopicConfig, bool]]:
        """(group, where to reach it, the topic there, writable) for every group holding it."""
        routing.require_topic_name(name)
        local = self._broker.topic_for_use(name)
        if self._cluster is None:
            if local is None:
                return []
            return [
                (
                    self._broker.config.broker_name,
                    self._endpoints(requested),
                    local,
                    not self._broker.is_replica,
                )
            ]
        external = await self._cluster.external_endpoints() if self._external else {}
        routes = await self._cluster.groups()
        topics = await asyncio.gather(
            *(
                _ready(local) if route.local else self._cluster.topic_on(route, name)
                for route in routes
            )
        )
        found = []
        for route, topic in zip(routes, topics, strict=True):
            if topic is None:
                continue
            address = external.get(route.name) or route.endpoint
            where = endpoints_of(address) if address else self._endpoints(requested)
            found.append((route.name, where, topic, route.writable))
        return found

    # -- routes and clients -------------------------------------------------

    @_unary(spb.QueryRouteResponse)
    async def QueryRoute(self, request, context):
        groups = await self._groups_with_topic(request.topic.name, request.endpoints)
        if not groups:
            raise RequestError(Code.TOPIC_NOT_FOUND, f"topic {request.topic.name!r} does not exist")
        queues = [
            queue
            for group, where, topic, writable in groups
            for queue in routing.message_queues(
                topic, group, where, request.topic.resource_namespace, writable_broker=writable
            )
        ]
        return spb.QueryRouteResponse(status=OK, message_queues=queues)

    @_unary(spb.QueryAssignmentResponse)
    async def QueryAssignment(self, request, context):
        routing.require_group_name(request.group.name)
        groups = await self._groups_with_topic(request.topic.name, request.endpoints)
        if not groups:
            raise RequestError(Code.TOPIC_NOT_FOUND, f"topic {request.topic.name!r} does not exist")
        found = [
            assignment
            for group, where, topic, writable in groups
            for assignment in routing.assignments(
                topic, group, where, request.topic.resource_namespace, writable_broker=writable
            )
        ]
        if not found:
            raise RequestError(
                Code.FORBIDDEN, f"topic {request.topic.name!r} has no readable queue"
            )
        return spb.QueryAssignmentResponse(status=OK, assignments=found)

    @_unary(spb.HeartbeatResponse)
    def Heartbeat(self, request, context):
        if request.client_type in _CONSUMER_TYPES:
            routing.require_group_name(request.group.name)
        self._clients.heartbeat(
            metadata_value(context, "x-mq-client-id"),
            request.client_type,
            request.group.name,
            owner=_owner(),
        )
        return spb.HeartbeatResponse(status=OK)

    @_unary(spb.NotifyClientTerminationResponse)
    def NotifyClientTermination(self, request, context):
        self._clients.terminate(metadata_value(context, "x-mq-client-id"), owner=_owner())
        return spb.NotifyClientTerminationResponse(status=OK)

    async def Telemetry(self, request_iterator, context) -> AsyncIterator[spb.TelemetryCommand]:
        """Answer each Settings and keep the stream open for broker-initiated commands.

        Replies wait in a bounded outbox: while it is full (the client sends but
        does not read) the stream is not read either, so the client's own flow
        control stops it instead of the broker's memory growing.
        """
        client_id = metadata_value(context, "x-mq-client-id")
        session = self._clients.session(client_id, owner=_owner())
        outbound = TelemetryOutbox()
        self._clients.stream_opened(session, outbound, context.peer())
        rejected: list[Undecodable] = []
        refused: list[RequestError] = []

        async def read() -> None:
            try:
                async for command in request_iterator:
                    if isinstance(command, Undecodable):
                        rejected.append(command)
                        break
                    if command.HasField("settings"):
                        try:
                            _check_settings_names(command.settings)
                        except RequestError as exc:
                            refused.append(exc)
                            break
                        reply = self._clients.settings_command(session, command.settings)
                        if not await outbound.put(reply):
                            break
            except (asyncio.CancelledError, grpc.aio.AioRpcError):
                pass
            finally:
                outbound.close()

        reader = asyncio.create_task(read())
        try:
            while (command := await outbound.get()) is not None:
                yield command
        finally:
            reader.cancel()
            outbound.close()
            self._clients.stream_closed(session, outbound)
        if rejected:
            await _refuse(context, rejected[0])
        if refused:
            # As RocketMQ's proxy: the stream ends, INVALID_ARGUMENT for a client error.
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"process client telemetryCommand failed. {refused[0].message}",
            )

    # -- producing ----------------------------------------------------------

    @_unary(spb.SendMessageResponse)
    async def SendMessage(self, request, context):
        return await self._sender.send(request, peer_host(context.peer()))

    @_unary(spb.EndTransactionResponse)
    async def EndTransaction(self, request, context):
        return await self._sender.end_transaction(request)

    # -- consuming ----------------------------------------------------------

    @_stream(spb.ReceiveMessageResponse)
    async def ReceiveMessage(self, request, context):
        namespace = request.group.resource_namespace
        async for response in self._receiver.receive(request, context.time_remaining(), namespace):
            yield response

    @_unary(spb.AckMessageResponse)
    def AckMessage(self, request, context):
        return self._receiver.ack(request)

    @_unary(spb.ChangeInvisibleDurationResponse)
    def ChangeInvisibleDuration(self, request, context):
        return self._receiver.change_invisible_duration(request)

    @_unary(spb.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(self, request, context):
        return await self._receiver.forward_to_dead_letter(request)

    @_stream(spb.PullMessageResponse)
    async def PullMessage(self, request, context):
        async for response in self._puller.pull(
            request, context.time_remaining(), request.group.resource_namespace
        ):
            yield response

    @_unary(spb.UpdateOffsetResponse)
    def UpdateOffset(self, request, context):
        return self._puller.update_offset(request)

    @_unary(spb.GetOffsetResponse)
    def GetOffset(self, request, context):
        return self._puller.get_offset(request)

    @_unary(spb.QueryOffsetResponse)
    def QueryOffset(self, request, context):
        return self._puller.query_offset(request)

    # -- not offered --------------------------------------------------------

    @_unary(spb.RecallMessageResponse)
    def RecallMessage(self, request, context):
        raise RequestError(Code.UNSUPPORTED, "recalling delayed messages is not supported")

    @_unary(spb.SyncLiteSubscriptionResponse)
    def SyncLiteSubscription(self, request, context):
        raise RequestError(Code.UNSUPPORTED, "lite topics are not supported")
