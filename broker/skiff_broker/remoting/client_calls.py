"""Requests the broker makes of a connected 4.x client and waits on: a consumer's running
info (GET_CONSUMER_RUNNING_INFO), which the Dashboard and mqadmin ask the broker for and
RocketMQ's broker forwards to the client.

Invariants:
- An answer is matched to its call by the connection it came over and the opaque the
  call was sent with; an answer nobody waits for (late, or never asked) is dropped.
- A call waits at most ``CLIENT_ANSWER_TIMEOUT_S``; the asker is then answered
  SYSTEM_ERROR naming the client, never left hanging. A closed connection is not asked.
- The answer goes back to the asker as the client gave it (code, remark, body), under
  the asker's opaque.
"""

from __future__ import annotations

import asyncio
import itertools

from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .consuming import Consuming
from .frames import RemotingCommand
from .service import Handler, text_field

# RocketMQ's broker gives the client as long by default.
CLIENT_ANSWER_TIMEOUT_S = 5.0


class ClientCalls:
    def __init__(self) -> None:
        self._waiting: dict[tuple[RemotingConnection, int], asyncio.Future[RemotingCommand]] = {}
        # Opaques of the broker's own requests; a client's answers echo them.
        self._opaques = itertools.count(1 << 30)

    async def call(
        self, connection: RemotingConnection, request: RemotingCommand, timeout_s: float
    ) -> RemotingCommand | None:
        """Send ``request`` over ``connection``; its answer, or None past ``timeout_s``."""
        if connection.closed:
            return None
        opaque = next(self._opaques)
        key = (connection, opaque)
        answer: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._waiting[key] = answer
        request.opaque = opaque
        try:
            connection.send(request)
            return await asyncio.wait_for(answer, timeout_s)
        except TimeoutError:
            return None
        finally:
            self._waiting.pop(key, None)

    def answered(self, response: RemotingCommand, connection: RemotingConnection) -> None:
        """A client's answer: to the call waiting on it, if one is."""
        waiting = self._waiting.get((connection, response.opaque))
        if waiting is not None and not waiting.done():
            waiting.set_result(response)


class ConsumerRunningInfo:
    """GET_CONSUMER_RUNNING_INFO: asked of the named online member of the group."""

    def __init__(self, consuming: Consuming, calls: ClientCalls) -> None:
        self._consuming = consuming
        self._calls = calls

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.GET_CONSUMER_RUNNING_INFO: self.running_info}

    async def running_info(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = text_field(request, "consumerGroup")
        client_id = text_field(request, "clientId")
        member = next((m for m in self._consuming.members(group) if m.client_id == client_id), None)
        if member is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{group}> <{client_id}> not online; list the group's "
                "clients with mqadmin consumerConnection",
            )
        asked = RemotingCommand(
            code=RequestCode.GET_CONSUMER_RUNNING_INFO,
            ext_fields={
                "consumerGroup": group,
                "clientId": client_id,
                "jstackEnable": request.ext_fields.get("jstackEnable") or "false",
            },
        )
        answer = await self._calls.call(member.connection, asked, CLIENT_ANSWER_TIMEOUT_S)
        if answer is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"the consumer {client_id} of {group} did not answer within "
                f"{CLIENT_ANSWER_TIMEOUT_S:g} s",
            )
        response = request.response(answer.code, answer.remark)
        response.body = answer.body
        return response
