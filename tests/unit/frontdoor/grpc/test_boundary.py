"""The one RPC error boundary, on the broker's gRPC server on 127.0.0.1.

A client of any service sees the same: a request that does not parse is
INVALID_ARGUMENT, an error the service expects is answered in the service's own
protocol, and a fault of the broker is logged and answered "the broker failed;
see its log" (after what a stream already sent) while the server keeps serving.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc
from tests.support.rpc_serving import serving

from skiff_broker.frontdoor.grpc.boundary import (
    UNEXPECTED_MESSAGE,
    Answer,
    rpc_boundary,
    rpc_stream_boundary,
)
from skiff_broker.frontdoor.grpc.undecodable import lenient_rpc_handler


class Refused(Exception):
    """An error the test service expects (as MessagingService expects RequestError)."""


def answer_as(response_type: type) -> Answer:
    """Errors as a response with a v2 status, as MessagingService answers them."""

    async def answer(context: grpc.aio.ServicerContext, error: Exception) -> object:
        code = pb.Code.BAD_REQUEST if isinstance(error, Refused) else pb.Code.INTERNAL_SERVER_ERROR
        return response_type(status=pb.Status(code=code, message=str(error)))

    return answer


class Service(service_pb2_grpc.MessagingServiceServicer):
    @rpc_boundary(answer_as(spb.QueryRouteResponse), expected=(Refused,))
    def QueryRoute(self, request, context):  # type: ignore[no-untyped-def]
        if request.topic.name == "refused":
            raise Refused("topic refused; use another")
        if request.topic.name == "broken":
            raise RuntimeError("the disk is on fire")
        return spb.QueryRouteResponse(status=pb.Status(code=pb.Code.OK, message="OK"))

    @rpc_stream_boundary(answer_as(spb.ReceiveMessageResponse))
    async def ReceiveMessage(self, request, context):  # type: ignore[no-untyped-def]
        yield spb.ReceiveMessageResponse(status=pb.Status(code=pb.Code.OK, message="first"))
        raise RuntimeError("lost the queue")


async def serve_and_call(scenario) -> None:  # type: ignore[no-untyped-def]
    handler = lenient_rpc_handler(
        spb.DESCRIPTOR.services_by_name["MessagingService"],
        Service(),
        spb,
        hint="send it with the apache.rocketmq.v2 protobuf definitions",
    )
    async with (
        serving(lambda server: server.add_generic_rpc_handlers((handler,))) as port,
        grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        await scenario(channel)


def query_route(channel: grpc.aio.Channel, topic: str):  # type: ignore[no-untyped-def]
    request = spb.QueryRouteRequest(topic=pb.Resource(name=topic))
    return service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(request)


def test_a_fault_is_logged_and_answered_internal_and_the_server_keeps_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario(channel: grpc.aio.Channel) -> None:
        broken = await query_route(channel, "broken")
        assert broken.status.code == pb.Code.INTERNAL_SERVER_ERROR
        assert broken.status.message == UNEXPECTED_MESSAGE
        assert "fire" not in broken.status.message
        ok = await query_route(channel, "fine")
        assert ok.status.code == pb.Code.OK

    with caplog.at_level(logging.ERROR, logger="skiff_broker.frontdoor.grpc.boundary"):
        asyncio.run(serve_and_call(scenario))
    failures = [r for r in caplog.records if "QueryRoute failed" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].exc_info is not None
    assert "the disk is on fire" in str(failures[0].exc_info[1])


def test_an_expected_error_is_answered_in_the_services_own_terms() -> None:
    async def scenario(channel: grpc.aio.Channel) -> None:
        refused = await query_route(channel, "refused")
        assert refused.status.code == pb.Code.BAD_REQUEST
        assert refused.status.message == "topic refused; use another"

    asyncio.run(serve_and_call(scenario))


def test_a_stream_keeps_what_it_sent_and_ends_with_the_failure() -> None:
    async def scenario(channel: grpc.aio.Channel) -> None:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        responses: list[spb.ReceiveMessageResponse] = []
        async for response in stub.ReceiveMessage(spb.ReceiveMessageRequest()):
            responses.append(response)
        assert [(r.status.code, r.status.message) for r in responses] == [
            (pb.Code.OK, "first"),
            (pb.Code.INTERNAL_SERVER_ERROR, UNEXPECTED_MESSAGE),
        ]

    asyncio.run(serve_and_call(scenario))


def test_a_request_that_does_not_parse_is_invalid_argument() -> None:
    async def scenario(channel: grpc.aio.Channel) -> None:
        raw = channel.unary_unary("/apache.rocketmq.v2.MessagingService/QueryRoute")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw(b"\xff\xff\xff")
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "apache.rocketmq.v2.QueryRouteRequest" in (caught.value.details() or "")

    asyncio.run(serve_and_call(scenario))
