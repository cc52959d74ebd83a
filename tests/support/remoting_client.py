"""A remoting client connection that writes RocketMQ's frames itself, for tests."""

from __future__ import annotations

import socket
from collections.abc import Callable

from skiff_broker.remoting.frames import FrameDecoder, RemotingCommand, encode

_opaques = iter(range(1, 10**9))


class Remoting:
    """One client connection speaking frames."""

    def __init__(self, endpoint: str) -> None:
        host, _, port = endpoint.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.decoder = FrameDecoder()
        self.pending: list[RemotingCommand] = []

    def call(self, code: int, body: bytes = b"", **fields: object) -> RemotingCommand:
        opaque = next(_opaques)
        request = RemotingCommand(
            code=code, opaque=opaque, ext_fields={k: str(v) for k, v in fields.items()}
        )
        request.body = body
        self.sock.sendall(encode(request))
        return self.answer_to(opaque)

    def answer_to(self, opaque: int) -> RemotingCommand:
        # Only answers: the broker's own requests (NOTIFY_CONSUMER_IDS_CHANGED, ...) number
        # their opaques on their own and stay pending for told().
        return self._next(lambda c: c.is_response and c.opaque == opaque)

    def told(self, code: int) -> list[RemotingCommand]:
        """The broker's requests of ``code`` received so far, taken from what is pending."""
        found = [c for c in self.pending if not c.is_response and c.code == code]
        self.pending = [c for c in self.pending if c not in found]
        return found

    def next_told(self, code: int) -> RemotingCommand:
        """The broker's next request of ``code``, read for if none is pending yet."""
        return self._next(lambda c: not c.is_response and c.code == code)

    def _next(self, wanted: Callable[[RemotingCommand], bool]) -> RemotingCommand:
        while True:
            for command in self.pending:
                if wanted(command):
                    self.pending.remove(command)
                    return command
            data = self.sock.recv(1 << 16)
            assert data, "the broker closed the connection"
            self.pending += self.decoder.feed(data)

    def closed_by_broker(self) -> bool:
        """True once the broker closed (or reset) this connection."""
        try:
            while data := self.sock.recv(1 << 16):
                del data
        except ConnectionResetError:
            pass
        return True

    def close(self) -> None:
        self.sock.close()


def remoting_call(endpoint: str, code: int, **fields: object) -> RemotingCommand:
    """One request on a connection of its own."""
    client = Remoting(endpoint)
    try:
        return client.call(code, **fields)
    finally:
        client.close()
