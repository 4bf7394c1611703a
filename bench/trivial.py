"""A trivial HTTP/1.1 responder on raw asyncio (uvloop when installed): every request gets the
same small JSON answer at once. The load generator is run against it to measure the
generator's own ceiling: the most requests per second it can produce when the server costs
next to nothing. ``python -m bench.trivial PORT``."""

from __future__ import annotations

import asyncio
import sys
from typing import cast

_BODY = b'{"id":"trivial-0000","status":"IN_QUEUE"}'
_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    b"content-length: " + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY
)


class _Responder(asyncio.Protocol):
    def __init__(self) -> None:
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while True:
            head_end = self._buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = bytes(self._buf[:head_end]).lower()
            marker = head.find(b"\r\ncontent-length:")
            length = 0
            if marker >= 0:
                line_end = head.find(b"\r\n", marker + 2)
                length = int(head[marker + 17 : line_end if line_end >= 0 else len(head)])
            if len(self._buf) < head_end + 4 + length:
                return
            del self._buf[: head_end + 4 + length]
            assert self._transport is not None
            self._transport.write(_ANSWER)


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Responder, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    port = int(sys.argv[1])
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(port))
    else:
        uvloop.run(serve(port))


if __name__ == "__main__":
    main()
