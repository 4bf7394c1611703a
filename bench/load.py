"""The load generator: a lean HTTP/1.1 client on asyncio (uvloop when installed), run in its
own process pinned to its own CPU.

A fixed number of keep-alive connections each send one request at a time (no pipelining) and
wait for the whole answer; every request's latency (``perf_counter``, send to last byte) and
status code is recorded. Non-2xx answers and failed connections count as errors.

Why not aiohttp: its client costs several times more CPU per request than this one, and on one
pinned core that would make the generator, not the server, the bottleneck for the fast
figures (B1). Its ceiling is measured against a trivial responder (``bench/trivial.py``) and
shown in the table, so a reader can see how far it is from the figures it produced.

``run_load(spec)`` starts ``python -m bench.load`` with the spec as JSON on stdin and reads the
result back as JSON from a file it names (not stdout: uvloop may leave stdout non-blocking, and
a large result would then be cut short).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import orjson

from bench import pinning


@dataclass
class LoadSpec:
    """What to send: ``requests`` requests over ``connections`` connections, cycling through
    ``paths``. The first ``warmup`` of them are sent but not recorded."""

    host: str
    port: int
    method: str
    paths: list[str]
    requests: int
    connections: int
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    warmup: int = 0
    #: Keep the ``id`` field of every k-th 2xx answer body (0: none), e.g. to ask their status.
    keep_ids_every: int = 0
    #: Send every latency back (percentiles are always computed); off for huge fills.
    return_latencies: bool = True


@dataclass
class LoadResult:
    requests: int
    errors: int
    #: Status code (as text, so it survives JSON) -> count; "conn" for a failed connection.
    statuses: dict[str, int]
    elapsed_s: float
    rate: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    #: The generator's own CPU time over the measured wall time: near 1.0 means it is saturated.
    generator_cpu: float
    latencies_ms: list[float] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    first_error: str | None = None
    #: CPU the server process used during the load per request (warm-up included in both),
    #: in µs, when measured (``run_load(server_cpu=...)``); ``workers_cpu_us``: the same for
    #: the server's other processes (skiff's workers).
    server_cpu_us: float = 0.0
    workers_cpu_us: float = 0.0


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in 0..100); 0.0 for an empty one."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), math.ceil(q / 100 * len(sorted_values))))
    return sorted_values[rank - 1]


# -- the client ----------------------------------------------------------------------------


class _Connection(asyncio.Protocol):
    """One keep-alive connection: parses answers with Content-Length or chunked bodies."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(ConnectionError(f"connection lost: {exc}"))

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._waiter is not None and not self._waiter.done():
            answer = self._parse()
            if answer is not None:
                self._waiter.set_result(answer)

    def request(self, payload: bytes) -> asyncio.Future[tuple[int, bytes, bool]]:
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(payload)
        return self._waiter

    def _parse(self) -> tuple[int, bytes, bool] | None:
        """(status, body, server closes) once the whole answer is buffered, else None."""
        buf = self._buf
        head_end = buf.find(b"\r\n\r\n")
        if head_end < 0:
            return None
        head = bytes(buf[:head_end]).lower()
        status = int(head[9:12])
        start = head_end + 4
        closes = b"\r\nconnection: close" in head
        marker = head.find(b"\r\ncontent-length:")
        if marker >= 0:
            line_end = head.find(b"\r\n", marker + 2)
            length = int(head[marker + 17 : line_end if line_end >= 0 else len(head)])
            if len(buf) < start + length:
                return None
            body = bytes(buf[start : start + length])
            del buf[: start + length]
            return status, body, closes
        if b"\r\ntransfer-encoding: chunked" in head:
            return self._parse_chunked(start, status, closes)
        if status in (204, 304):
            del buf[:start]
            return status, b"", closes
        raise ValueError("an answer without Content-Length or chunked encoding")

    def _parse_chunked(
        self, start: int, status: int, closes: bool
    ) -> tuple[int, bytes, bool] | None:
        buf = self._buf
        body = bytearray()
        pos = start
        while True:
            size_end = buf.find(b"\r\n", pos)
            if size_end < 0:
                return None
            size = int(bytes(buf[pos:size_end]).split(b";")[0], 16)
            if size == 0:
                end = buf.find(b"\r\n\r\n", size_end)
                if end < 0:
                    return None
                del buf[: end + 4]
                return status, bytes(body), closes
            chunk_start = size_end + 2
            if len(buf) < chunk_start + size + 2:
                return None
            body += buf[chunk_start : chunk_start + size]
            pos = chunk_start + size + 2


def _request_bytes(spec: LoadSpec, path: str) -> bytes:
    lines = [f"{spec.method} {path} HTTP/1.1", f"Host: {spec.host}:{spec.port}"]
    lines += [f"{name}: {value}" for name, value in spec.headers.items()]
    body = spec.body.encode() if spec.body is not None else b""
    if spec.body is not None or spec.method in ("POST", "PUT", "PATCH"):
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class _Run:
    """Shared state of one load run: the next request index and what was recorded."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.next = 0
        self.latencies: list[float] = []
        self.statuses: dict[str, int] = {}
        self.errors = 0
        self.ids: list[str] = []
        self.first_error: str | None = None
        self.start: float | None = None
        self.end = 0.0
        # Requests are prebuilt when few paths repeat (the common case); built per request
        # when every request has its own path (status of many ids).
        self.cached = (
            [_request_bytes(spec, p) for p in spec.paths] if len(spec.paths) <= 64 else None
        )

    def payload(self, index: int) -> bytes:
        slot = index % len(self.spec.paths)
        if self.cached is not None:
            return self.cached[slot]
        return _request_bytes(self.spec, self.spec.paths[slot])

    def record(self, index: int, status: str, sent: float, done: float, body: bytes) -> None:
        if index < self.spec.warmup:
            return
        if self.start is None or sent < self.start:
            self.start = sent
        self.end = max(self.end, done)
        self.statuses[status] = self.statuses.get(status, 0) + 1
        ok = status.isdigit() and 200 <= int(status) < 300
        if not ok:
            self.errors += 1
            if self.first_error is None:
                self.first_error = f"{status}: {body[:300]!r}"
        self.latencies.append((done - sent) * 1000)
        every = self.spec.keep_ids_every
        if ok and every and index % every == 0:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self.ids.append(str(orjson.loads(body)["id"]))


async def _connect(spec: LoadSpec) -> _Connection:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(_Connection, spec.host, spec.port)
    return conn


async def _drive(run: _Run) -> None:
    """One connection: take the next index, send, wait for the answer, repeat."""
    perf = time.perf_counter
    conn = await _connect(run.spec)
    try:
        while run.next < run.spec.requests:
            index = run.next
            run.next += 1
            if conn.closed:
                conn = await _connect(run.spec)
            sent = perf()
            try:
                status, body, closes = await conn.request(run.payload(index))
            except ConnectionError as exc:
                run.record(index, "conn", sent, perf(), str(exc).encode())
                conn = await _connect(run.spec)
                continue
            run.record(index, str(status), sent, perf(), body)
            if closes and conn.transport is not None:
                conn.transport.close()
                conn = await _connect(run.spec)
    finally:
        if conn.transport is not None:
            conn.transport.close()


async def generate(spec: LoadSpec) -> LoadResult:
    run = _Run(spec)
    cpu0 = time.process_time()
    await asyncio.gather(*(_drive(run) for _ in range(spec.connections)))
    cpu = time.process_time() - cpu0
    measured = len(run.latencies)
    elapsed = max(1e-9, run.end - (run.start or run.end))
    ordered = sorted(run.latencies)
    return LoadResult(
        requests=measured,
        errors=run.errors,
        statuses=run.statuses,
        elapsed_s=elapsed,
        rate=measured / elapsed,
        p50_ms=percentile(ordered, 50),
        p90_ms=percentile(ordered, 90),
        p99_ms=percentile(ordered, 99),
        max_ms=ordered[-1] if ordered else 0.0,
        mean_ms=sum(ordered) / len(ordered) if ordered else 0.0,
        generator_cpu=min(1.0, cpu / elapsed),
        latencies_ms=run.latencies if spec.return_latencies else [],
        ids=run.ids,
        first_error=run.first_error,
    )


def _event_loop_run(spec: LoadSpec) -> LoadResult:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(generate(spec))
    return uvloop.run(generate(spec))


# -- the process boundary ----------------------------------------------------------------


def run_load(
    spec: LoadSpec,
    timeout_s: float = 3600,
    server_cpu: Callable[[], tuple[float, float]] | None = None,
) -> LoadResult:
    """Run ``spec`` in a generator process pinned to the load CPU; its result. With
    ``server_cpu`` (CPU seconds so far of the server and of its workers), also what they
    spent on it."""
    cpu_before = server_cpu() if server_cpu is not None else (0.0, 0.0)
    with tempfile.TemporaryDirectory(prefix="bench-load-") as folder:
        result_path = Path(folder) / "result.json"
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.load", str(result_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=pinning.pin_to_load_cpu,
            cwd=pinning.REPO_ROOT,
        )
        try:
            _, err = proc.communicate(orjson.dumps(dataclasses.asdict(spec)), timeout=timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if proc.returncode != 0:
            raise RuntimeError(
                f"the load generator failed ({proc.returncode}): {err.decode()[-2000:]}"
            )
        result = LoadResult(**orjson.loads(result_path.read_bytes()))
    if server_cpu is not None:
        server, workers = server_cpu()
        result.server_cpu_us = (server - cpu_before[0]) / max(1, spec.requests) * 1e6
        result.workers_cpu_us = (workers - cpu_before[1]) / max(1, spec.requests) * 1e6
    return result


def main() -> None:
    spec = LoadSpec(**json.loads(sys.stdin.buffer.read()))
    result = _event_loop_run(spec)
    Path(sys.argv[1]).write_bytes(orjson.dumps(dataclasses.asdict(result)))
    os._exit(0)  # skip interpreter teardown: the result is written, nothing else to flush


if __name__ == "__main__":
    main()
