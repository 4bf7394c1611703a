"""The read end of a pipe (or a terminal's master side) as an event loop's transport, its
descriptor closed exactly once.

uvloop's pipe transport (0.23) hands the descriptor to libuv, which closes it when the transport
closes, and then closes the file object it was given too: a file object that owns the number
closes it a second time. Between the two, the number may have been given to anything else the
server opened (another worker's log file, the pipe of a subprocess a thread is starting), which
the second close then takes from it (MagicStack/uvloop#763: reads and writes of those fail with
EBADF, a log is cut off). asyncio's own transport closes the file object only. So whether the
file object must own the descriptor depends on the loop, and is asked of the loop itself once
per kind of loop (``_loop_closes_it``): a uvloop that stops closing it twice is followed without
a change here."""

from __future__ import annotations

import asyncio
import os
from typing import BinaryIO

#: Per kind of event loop: whether its pipe transport closes the descriptor itself.
_CLOSES_IT: dict[type[asyncio.AbstractEventLoop], bool] = {}


async def _loop_closes_it(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop``'s read-pipe transport closes the descriptor of a file object that does
    not own it: a pipe of its own, connected and closed."""
    kind = type(loop)
    known = _CLOSES_IT.get(kind)
    if known is not None:
        return known
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    ended = loop.create_future()

    class Protocol(asyncio.Protocol):
        def connection_lost(self, exc: Exception | None) -> None:
            if not ended.done():
                ended.set_result(None)

    try:
        transport, _ = await loop.connect_read_pipe(
            Protocol,
            open(read_fd, "rb", buffering=0, closefd=False),  # noqa: ASYNC230, SIM115 - no I/O
        )
    except BaseException:
        os.close(read_fd)
        raise
    transport.close()
    await ended
    # The transport's close is done by now (connection_lost comes last, on both loops).
    try:
        os.fstat(read_fd)
    except OSError:
        closes = True
    else:
        closes = False
        os.close(read_fd)
    _CLOSES_IT[kind] = closes
    return closes


async def connect_read_end(
    loop: asyncio.AbstractEventLoop, fd: int, protocol: asyncio.BaseProtocol
) -> asyncio.ReadTransport:
    """``fd``, a pipe's read end this call now owns, as ``loop``'s transport feeding
    ``protocol``; closing the transport closes ``fd`` once."""
    try:
        owns = not await _loop_closes_it(loop)
    except BaseException:
        os.close(fd)
        raise
    # An open of a descriptor already open: no I/O to wait for.
    file: BinaryIO = open(fd, "rb", buffering=0, closefd=owns)  # noqa: ASYNC230, SIM115
    try:
        transport, _ = await loop.connect_read_pipe(lambda: protocol, file)
    except BaseException:
        # Not handed over: closed here, by whichever owns it.
        if owns:
            file.close()
        else:
            os.close(fd)
        raise
    return transport
