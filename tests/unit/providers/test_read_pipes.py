"""A pipe's read end as a transport closes its descriptor once, on uvloop (the server's loop)
and on asyncio's own: a second close takes the number from whatever was given it meanwhile
(MagicStack/uvloop#763). A thread opening and using descriptors beside many transports that
open and close is the server's case (a worker's home removed by ``rm`` in a thread while other
workers end): no descriptor of the thread's may be closed under it."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from skiff.providers.read_pipes import _loop_closes_it, connect_read_end

ROUNDS = 300

Runner = Callable[[Coroutine[Any, Any, None]], None]
LOOPS: list[tuple[str, Runner]] = [("uvloop", uvloop.run), ("asyncio", asyncio.run)]


@pytest.mark.parametrize(("name", "run"), LOOPS, ids=[name for name, _ in LOOPS])
def test_a_read_end_is_closed_once_and_takes_no_other_descriptor(name: str, run: Runner) -> None:
    stolen: list[str] = []
    done = threading.Event()

    def use_descriptors() -> None:
        # What a thread of the server does: its own descriptors, opened, used and closed.
        while not done.is_set():
            read_fd, write_fd = os.pipe()
            try:
                os.write(write_fd, b"x")
                os.read(read_fd, 1)
            except OSError as exc:
                stolen.append(repr(exc))
            for fd in (read_fd, write_fd):
                try:
                    os.close(fd)
                except OSError as exc:
                    stolen.append(repr(exc))

    async def transports() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(ROUNDS):
            read_fd, write_fd = os.pipe()
            reader = asyncio.StreamReader()
            transport = await connect_read_end(loop, read_fd, asyncio.StreamReaderProtocol(reader))
            os.close(write_fd)
            assert await reader.read() == b""
            transport.close()
            await asyncio.sleep(0)
        await asyncio.sleep(0.05)

    thread = threading.Thread(target=use_descriptors)
    thread.start()
    try:
        run(transports())
    finally:
        done.set()
        thread.join()
    assert stolen == []


@pytest.mark.parametrize(("name", "run"), LOOPS, ids=[name for name, _ in LOOPS])
def test_the_descriptor_is_closed_when_the_transport_is(name: str, run: Runner) -> None:
    async def one() -> None:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        ended = asyncio.StreamReader()
        transport = await connect_read_end(loop, read_fd, asyncio.StreamReaderProtocol(ended))
        os.close(write_fd)
        await ended.read()
        transport.close()
        await asyncio.sleep(0.05)
        with pytest.raises(OSError):
            os.fstat(read_fd)

    run(one())


def test_uvloop_closes_the_descriptor_itself_and_asyncio_leaves_it_to_the_file() -> None:
    answers: dict[str, bool] = {}

    async def ask(name: str) -> None:
        answers[name] = await _loop_closes_it(asyncio.get_running_loop())

    for name, run in LOOPS:
        run(ask(name))
    assert answers == {"uvloop": True, "asyncio": False}
