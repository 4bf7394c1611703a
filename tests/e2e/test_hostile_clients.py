"""One careless or hostile client must not hurt everyone (issue 13, items 4 and 5), against a
real ``skiff serve``: connections that send their head or body too slowly are closed after
the time limits while every other request is answered; a flood of connections over the cap
does not stop ``/healthz``; a ``/v1`` or console body is refused from its headers (the key,
the size) before it is read."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import Server, running

#: Short limits, so the tests wait seconds, not the defaults' tens of seconds.
QUICK = {"SKIFF_HEADER_TIMEOUT_SECONDS": "1", "SKIFF_BODY_TIMEOUT_SECONDS": "1"}
#: How long a test waits for the server to close what it should (well past the 1 s limits).
WITHIN = 15.0


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(tmp_path_factory.mktemp("quick") / "data", env=QUICK) as srv:
        yield srv


@pytest.fixture(scope="module")
def endpoint_id(quick: Server) -> str:
    # No workers: its jobs wait, and /health answers from the store alone.
    return str(quick.create_endpoint(workersMax=0)["id"])


async def _connect(server: Server) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port)


async def _closed_by_server(reader: asyncio.StreamReader, within: float) -> bytes | None:
    """What the server sent before closing the connection, or None if it kept it open."""
    received = b""
    deadline = time.monotonic() + within
    try:
        while (left := deadline - time.monotonic()) > 0:
            chunk = await asyncio.wait_for(reader.read(65536), left)
            if not chunk:
                return received
            received += chunk
    except TimeoutError:
        return None
    except ConnectionError:  # reset (a slowloris wrote after the close): closed all the same
        return received
    return None


async def _trickle(writer: asyncio.StreamWriter, head: bytes, stop: asyncio.Event) -> None:
    """A slowloris: the head a byte at a time, never finished."""
    for byte in head:
        if stop.is_set() or writer.is_closing():
            return
        try:
            writer.write(bytes([byte]))
            await writer.drain()
        except ConnectionError:
            return
        await asyncio.sleep(0.2)  # the point: a byte every 0.2 s, slower than any real client


async def test_slow_headers_are_closed_after_the_header_timeout_while_others_are_answered(
    quick: Server, endpoint_id: str
) -> None:
    slow_head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200
    stop = asyncio.Event()
    lorises = [await _connect(quick) for _ in range(100)]
    silent = [await _connect(quick) for _ in range(50)]  # open, never a byte
    trickles = [asyncio.create_task(_trickle(w, slow_head, stop)) for _, w in lorises]
    try:
        async with httpx.AsyncClient(base_url=quick.url, timeout=5) as client:
            for _ in range(3):
                assert (await client.get("/healthz")).status_code == 200
                health = await client.get(
                    f"/v2/{endpoint_id}/health", headers={"Authorization": quick.key}
                )
                assert health.status_code == 200
                await asyncio.sleep(0.3)  # the point: others keep being answered over time
        slow = await asyncio.gather(*(_closed_by_server(r, WITHIN) for r, _ in lorises))
        idle = await asyncio.gather(*(_closed_by_server(r, WITHIN) for r, _ in silent))
    finally:
        stop.set()
        for task in trickles:
            task.cancel()
        for _, writer in [*lorises, *silent]:
            writer.close()
    assert all(answer is not None for answer in slow), "slow heads held open"
    # Those that read the server's last words (a reset can overtake them) read a 408.
    assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in slow if answer)
    assert any(slow)
    # A connection that never said a word is closed without an answer.
    assert idle == [b""] * len(silent)


async def test_a_body_shorter_than_its_content_length_is_closed_after_the_body_timeout(
    quick: Server, endpoint_id: str
) -> None:
    key = quick.key.encode()
    heads = [
        # A hot job route (its body read inside the HTTP protocol) ...
        b"POST /v2/" + endpoint_id.encode() + b"/run HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: " + key + b"\r\nContent-Length: 5000\r\n\r\n" + b'{"input"',
        # ... and one through the full application.
        b"POST /v1/templates HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + key
        + b"\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{",
    ]
    connections = [await _connect(quick) for _ in heads]
    for (_, writer), head in zip(connections, heads, strict=True):
        writer.write(head)
        await writer.drain()
    answers = await asyncio.gather(*(_closed_by_server(r, WITHIN) for r, _ in connections))
    for _, writer in connections:
        writer.close()
    assert [a[:13] if a else a for a in answers] == [b"HTTP/1.1 408 "] * 2


async def test_a_connection_idle_between_requests_is_kept_past_the_header_timeout(
    quick: Server,
) -> None:
    # A worker's pooled connection idles through a long synchronous job: never cut it.
    reader, writer = await _connect(quick)
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    answers = []
    for _ in range(2):
        writer.write(request)
        await writer.drain()
        answers.append(await asyncio.wait_for(reader.readuntil(b"}"), 5))
        await asyncio.sleep(2.5)  # past the 1 s header and body limits
    writer.close()
    assert all(answer.startswith(b"HTTP/1.1 200 ") for answer in answers)


async def test_connections_over_the_cap_do_not_stop_healthz(tmp_path: Path) -> None:
    # A long header timeout: here only the cap may close a connection.
    env = {"SKIFF_MAX_CONNECTIONS": "40", "SKIFF_HEADER_TIMEOUT_SECONDS": "120"}
    with running(tmp_path / "data", env=env) as server:
        flood = [await _connect(server) for _ in range(60)]
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=5) as client:
                for _ in range(5):
                    assert (await client.get("/healthz")).status_code == 200
            closed = await asyncio.gather(*(_closed_by_server(r, 2) for r, _ in flood))
        finally:
            for _, writer in flood:
                writer.close()
    # The oldest connections that had not sent a request made room; at most the cap is open.
    assert sum(answer is not None for answer in closed) >= len(flood) - 40
    assert closed[0] is not None and closed[-1] is None


async def _post_head(server: Server, path: bytes, headers: bytes, body: bytes) -> bytes:
    """Send a head and the start of a body the size it claims is never sent; answer what
    the server says (and that it then closes the connection: b"" past its answer)."""
    reader, writer = await _connect(server)
    writer.write(b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n" + body)
    await writer.drain()
    answer = await _closed_by_server(reader, 10)
    writer.close()
    return answer or b"(kept open)"


async def test_an_unauthenticated_v1_body_is_refused_before_it_is_read(quick: Server) -> None:
    claimed = b"Content-Type: application/json\r\nContent-Length: 300000000\r\n"
    answer = await _post_head(quick, b"/v1/templates", claimed, b"{" + b" " * 65536)
    assert answer.startswith(b"HTTP/1.1 401 ")
    assert b"connection: close" in answer.lower()


async def test_an_oversized_v1_body_is_refused_before_it_is_read(quick: Server) -> None:
    key = b"Authorization: Bearer " + quick.key.encode() + b"\r\n"
    claimed = key + b"Content-Type: application/json\r\nContent-Length: 300000000\r\n"
    answer = await _post_head(quick, b"/v1/templates", claimed, b"{")
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b'"message":"the request body is larger than 1 MB"' in answer


async def test_a_chunked_v1_body_is_cut_off_with_a_413_once_past_the_limit(
    quick: Server,
) -> None:
    key = b"Authorization: Bearer " + quick.key.encode() + b"\r\n"
    head = key + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
    piece = 64 * 1024
    # 17 pieces of 64 KiB pass the 1 MiB limit; the body never ends (no last chunk): the
    # 413 comes from counting, not from the end of the body.
    chunks = (b"%x\r\n" % piece + b" " * piece + b"\r\n") * 17
    answer = await _post_head(quick, b"/v1/templates", head, chunks)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b'"message":"the request body is larger than 1 MB"' in answer


async def test_a_console_form_without_a_session_is_refused_past_the_sign_in_size(
    quick: Server,
) -> None:
    claimed = b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 300000000\r\n"
    answer = await _post_head(quick, b"/console/login", claimed, b"api_key=")
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"larger than 64 KB" in answer


def test_the_v1_description_documents_its_413(quick: Server) -> None:
    schema = httpx.get(f"{quick.url}/v1/openapi.json").json()
    assert "413" in schema["paths"]["/templates"]["post"]["responses"]
