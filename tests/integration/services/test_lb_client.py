"""The proxy's HTTP/1.1 client against real sockets: keep-alive and when a connection is not
kept, answers without a body, informational answers, chunked request bodies, and what it
refuses of a worker's answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from skiff.services.lb_client import (
    HEADER_LINE_BYTES,
    Connection,
    NotConnected,
    Pool,
    UpstreamError,
)

Answer = Callable[[bytes, asyncio.StreamReader], Awaitable[bytes]]


class Worker:
    """A worker's HTTP server answering each request with what ``answer`` gives for its head;
    it counts its connections and keeps what it received."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.opened = 0
        self.received: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.received.append(head)
                writer.write(await self.answer(head, reader))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


async def ok(_head: bytes, _reader: asyncio.StreamReader) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


@pytest.fixture
async def pool() -> AsyncIterator[Pool]:
    made = Pool(connect_timeout=5)
    yield made
    made.close()


async def exchange(
    pool: Pool, address: str, method: str = "GET", body: bytes | None = None, extra: bytes = b""
) -> tuple[int, bytes, Connection]:
    conn = pool.idle(address) or await pool.connect(address)
    head = f"{method} /x HTTP/1.1\r\nhost: {address}\r\n".encode() + extra + b"\r\n"
    await conn.send(method, head, body, chunked=False)
    answer = await conn.head(5)
    got = b"".join([piece async for piece in conn.body(5)])
    pool.give_back(conn)
    return answer.status, got, conn


async def test_a_connection_is_kept_for_the_next_request_once_its_answer_is_read() -> None:
    worker = Worker(ok)
    address = await worker.start()
    pool = Pool(5)
    try:
        first = await exchange(pool, address)
        second = await exchange(pool, address)
    finally:
        pool.close()
        await worker.stop()
    assert first[:2] == second[:2] == (200, b"ok")
    assert first[2] is second[2] and worker.opened == 1


async def test_an_answer_saying_connection_close_is_the_connections_last(pool: Pool) -> None:
    async def closing(_head: bytes, _reader: asyncio.StreamReader) -> bytes:
        return b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"

    worker = Worker(closing)
    address = await worker.start()
    first = await exchange(pool, address)
    second = await exchange(pool, address)
    await worker.stop()
    assert first[:2] == second[:2] == (200, b"ok")
    assert first[2] is not second[2] and worker.opened == 2


async def test_an_answer_to_head_has_no_body_whatever_its_length_says(pool: Pool) -> None:
    async def head_answer(_head: bytes, _reader: asyncio.StreamReader) -> bytes:
        return b"HTTP/1.1 200 OK\r\ncontent-length: 1234\r\n\r\n"

    worker = Worker(head_answer)
    address = await worker.start()
    status, body, conn = await exchange(pool, address, method="HEAD")
    await worker.stop()
    assert (status, body) == (200, b"")
    assert not conn.reusable  # what follows on it could not be told from a body


async def test_an_informational_answer_is_passed_over_for_the_real_one(pool: Pool) -> None:
    async def early_hints(_head: bytes, _reader: asyncio.StreamReader) -> bytes:
        return (
            b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n"
            b"HTTP/1.1 201 Created\r\ncontent-length: 3\r\nx-real: 1\r\n\r\nnew"
        )

    worker = Worker(early_hints)
    address = await worker.start()
    conn = await pool.connect(address)
    await conn.send("POST", f"POST /x HTTP/1.1\r\nhost: {address}\r\n\r\n".encode(), None, False)
    answer = await conn.head(5)
    body = b"".join([piece async for piece in conn.body(5)])
    pool.give_back(conn)
    await worker.stop()
    assert answer.status == 201 and answer.headers == [(b"content-length", b"3"), (b"x-real", b"1")]
    assert body == b"new"


async def test_a_body_of_unknown_length_is_sent_in_chunks(pool: Pool) -> None:
    async def echo(head: bytes, reader: asyncio.StreamReader) -> bytes:
        assert b"transfer-encoding: chunked" in head
        received = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            piece = await reader.readexactly(size + 2)
            if size == 0:
                break
            received += piece[:-2]
        return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(received), received)

    async def pieces() -> AsyncIterator[bytes]:
        for piece in (b"abc", b"", b"defg", b"h" * 70_000):
            yield piece

    worker = Worker(echo)
    address = await worker.start()
    conn = await pool.connect(address)
    head = f"POST /x HTTP/1.1\r\nhost: {address}\r\ntransfer-encoding: chunked\r\n\r\n".encode()
    await conn.send("POST", head, pieces(), chunked=True)
    assert (await conn.head(5)).status == 200
    body = b"".join([piece async for piece in conn.body(5)])
    pool.give_back(conn)
    await worker.stop()
    assert body == b"abcdefg" + b"h" * 70_000


async def test_a_header_line_over_the_bound_fails_the_request(pool: Pool) -> None:
    async def huge(_head: bytes, _reader: asyncio.StreamReader) -> bytes:
        line = b"x-big: " + b"b" * (HEADER_LINE_BYTES + 1)
        return b"HTTP/1.1 200 OK\r\n" + line + b"\r\ncontent-length: 0\r\n\r\n"

    worker = Worker(huge)
    address = await worker.start()
    with pytest.raises(UpstreamError, match="too long"):
        await exchange(pool, address)
    await worker.stop()


async def test_an_answer_that_is_not_http_fails_the_request(pool: Pool) -> None:
    async def garbage(_head: bytes, _reader: asyncio.StreamReader) -> bytes:
        return b"SSH-2.0-OpenSSH_9.2\r\n\r\n"

    worker = Worker(garbage)
    address = await worker.start()
    with pytest.raises(UpstreamError):
        await exchange(pool, address)
    await worker.stop()


async def test_an_answer_cut_short_fails_its_body(pool: Pool) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        await writer.drain()
        writer.close()  # seven bytes short

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    conn = await pool.connect(address)
    await conn.send("GET", f"GET /x HTTP/1.1\r\nhost: {address}\r\n\r\n".encode(), None, False)
    assert (await conn.head(5)).status == 200
    got = b""
    with pytest.raises(UpstreamError):
        async for piece in conn.body(5):
            got += piece
    assert got == b"abc" and not conn.reusable
    server.close()
    await server.wait_closed()


async def test_a_worker_not_listening_is_not_connected(pool: Pool) -> None:
    worker = Worker(ok)
    address = await worker.start()
    await worker.stop()
    with pytest.raises(NotConnected):
        await pool.connect(address)
