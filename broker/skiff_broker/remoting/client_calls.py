"""Requests the broker makes of a connected 4.x client and waits on, as RocketMQ's broker
forwards them for the Dashboard and mqadmin: a consumer's running info
(GET_CONSUMER_RUNNING_INFO) and consuming one stored message now
(CONSUME_MESSAGE_DIRECTLY, with the message's record as the body).

Invariants:
- An answer is matched to its call by the connection it came over and the opaque the
  call was sent with; an answer nobody waits for (late, or never asked) is dropped.
- A call waits at most ``CLIENT_ANSWER_TIMEOUT_S``; the asker is then answered
  SYSTEM_ERROR naming the client, never left hanging. A closed connection is not asked.
- The answer goes back to the asker as the client gave it (code, remark, body), under
  the asker's opaque.
- A message is named by its offset message ID; one this broker did not store is
  refused before any client is asked.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .consuming import Consuming
from .frames import RemotingCommand
from .service import Handler, HeaderError, text_field

# Under the admin tools' own 5 s timeout, so the asker reads why instead of timing out
# itself (RocketMQ's broker waits 10 s, past that timeout).
CLIENT_ANSWER_TIMEOUT_S = 4.0


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


class ForwardedToClients:
    """``record_at``: the stored record at a commit-log offset, None if none starts there."""

    def __init__(
        self,
        consuming: Consuming,
        calls: ClientCalls,
        record_at: Callable[[int], bytes | None],
        broker_name: str,
    ) -> None:
        self._consuming = consuming
        self._calls = calls
        self._record_at = record_at
        self._broker_name = broker_name

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_directly,
        }

    def _member(self, request: RemotingCommand) -> RemotingConnection | RemotingCommand:
        """The named client's connection, or the answer saying it is not online."""
        group = text_field(request, "consumerGroup")
        client_id = text_field(request, "clientId")
        for member in self._consuming.members(group):
            if member.client_id == client_id:
                return member.connection
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            f"The Consumer <{group}> <{client_id}> not online; list the group's "
            "clients with mqadmin consumerConnection",
        )

    async def _forward(
        self, request: RemotingCommand, client: RemotingConnection, asked: RemotingCommand
    ) -> RemotingCommand:
        answer = await self._calls.call(client, asked, CLIENT_ANSWER_TIMEOUT_S)
        if answer is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"the consumer {request.ext_fields.get('clientId')} of "
                f"{request.ext_fields.get('consumerGroup')} did not answer within "
                f"{CLIENT_ANSWER_TIMEOUT_S:g} s",
            )
        response = request.response(answer.code, answer.remark)
        response.body = answer.body
        return response

    async def running_info(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        client = self._member(request)
        if isinstance(client, RemotingCommand):
            return client
        asked = RemotingCommand(
            code=RequestCode.GET_CONSUMER_RUNNING_INFO,
            ext_fields={
                "consumerGroup": request.ext_fields["consumerGroup"],
                "clientId": request.ext_fields["clientId"],
                "jstackEnable": request.ext_fields.get("jstackEnable") or "false",
            },
        )
        return await self._forward(request, client, asked)

    async def consume_directly(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        message_id = text_field(request, "msgId")
        # An offset message ID ends with the record's commit-log offset, 8 bytes in hex.
        try:
            if len(message_id) not in (32, 56):
                raise ValueError
            offset = int(message_id[-16:], 16)
        except ValueError:
            raise HeaderError(
                f"msgId {message_id!r} is not an offset message ID; give the one the send "
                "answered (offsetMsgId), or look the message up with queryMsgById"
            ) from None
        record = await asyncio.to_thread(self._record_at, offset)
        if record is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"no message is stored at commit-log offset {offset}: the message ID is not "
                "one this broker gave, or retention deleted the message",
            )
        client = self._member(request)
        if isinstance(client, RemotingCommand):
            return client
        asked = RemotingCommand(
            code=RequestCode.CONSUME_MESSAGE_DIRECTLY,
            ext_fields={
                **request.ext_fields,
                "brokerName": self._broker_name,
                "topicSysFlag": "0",
            },
        )
        asked.body = record
        return await self._forward(request, client, asked)
