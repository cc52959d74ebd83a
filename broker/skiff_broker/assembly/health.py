"""The standard gRPC health service (grpc.health.v1.Health) on the client port.

SERVING from the moment the store is recovered and every listener accepts calls,
NOT_SERVING before (while starting) and from the moment the broker begins to stop;
a stopping broker never turns SERVING again. The overall status (service ``""``) and
``apache.rocketmq.v2.MessagingService``'s are always the same.

Probes carry no request signature, so the authentication gate lets this service
(and only it, named in ``frontdoor.grpc.health_service``) through; it tells nothing but that status.
``List`` (which would name every service) is not offered: it answers UNIMPLEMENTED.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio
from rocketmq.grpc_protocol import service_pb2 as spb

from ..frontdoor.grpc.server import RpcServer

MESSAGING_SERVICE = spb.DESCRIPTOR.services_by_name["MessagingService"].full_name
_REPORTED = ("", MESSAGING_SERVICE)


class _CheckAndWatch(aio.HealthServicer):
    """The standard servicer, whose ``List`` would fail as an unexpected error."""

    async def List(self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext):
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "this broker offers Check and Watch of grpc.health.v1.Health, not List; "
            f"check the service {MESSAGING_SERVICE!r} or the overall status ('')",
        )


class BrokerHealth:
    def __init__(self) -> None:
        self._servicer = _CheckAndWatch()
        self._started = False

    def add_to_server(self, server: RpcServer) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, server)

    async def starting(self) -> None:
        for service in _REPORTED:
            await self._servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)

    async def serving(self) -> None:
        for service in _REPORTED:
            await self._servicer.set(service, health_pb2.HealthCheckResponse.SERVING)

    async def stopping(self) -> None:
        await self._servicer.enter_graceful_shutdown()
