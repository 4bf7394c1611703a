"""Large worker bodies (a job's result or stream chunk over 1 MB) read apart from the loop.

A worker may post up to 64 MB of JSON for its job, and parsing it builds a Python object per
value: 64 MB of small numbers held the event loop, and so every tenant's requests, for a
second, and took 2.8 GB of the server's memory. So such a body is parsed in a helper process
(``LargeBodies``, started at the first one) under a memory limit. What it cannot read within
that fails its job with the reason (as a result nested too deep does), and the server goes
on. And a user's workers have at most ``TURNS_PER_USER`` large bodies read at a time: the
others wait before their bodies are read, so many workers posting at once hold their
sockets, not 64 MB each of the server's memory.

The helper is started with ``spawn``: a fresh interpreter that imports only what parsing
needs, not a fork of the server with its sockets and threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import resource
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from skiff.domain.results import (
    PARSE_MEMORY_LIMIT,
    Outcome,
    WorkerChunk,
    WorkerResult,
    parse_worker_result,
    read_stream_chunk,
    too_large_to_read,
)
from skiff.keyed_turns import KeyedTurns

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Large bodies of one user read at a time (each up to 64 MB in the server's memory).
TURNS_PER_USER = 2


def _limit_memory(limit: int) -> None:
    """In the helper, before its first body: past ``limit`` an allocation fails there
    (``MemoryError``), in that process alone."""
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


class LargeBodies:
    """The helper process that parses large bodies, and the users' turns to have one read."""

    def __init__(
        self, memory_limit: int = PARSE_MEMORY_LIMIT, turns_per_user: int = TURNS_PER_USER
    ) -> None:
        self._memory_limit = memory_limit
        self._pool: ProcessPoolExecutor | None = None
        #: Each user's turns to have a large body read and parsed.
        self.turns = KeyedTurns(turns_per_user)

    def turn(self, user_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Held while one of the user's large bodies is read and parsed."""
        return self.turns.turn(user_id)

    async def result(self, body: bytes) -> WorkerResult:
        """``parse_worker_result`` in the helper; a body it cannot read fails the job."""
        refused = WorkerResult(
            Outcome.FAILED, None, too_large_to_read("result"), False, refused=True
        )
        return await self._parse(parse_worker_result, body, refused)

    async def chunk(self, body: bytes) -> WorkerChunk:
        """``read_stream_chunk`` in the helper; a body it cannot read fails the job."""
        refused = WorkerChunk("", None, refused=too_large_to_read("stream chunk"))
        return await self._parse(read_stream_chunk, body, refused)

    async def _parse(self, parse: Callable[[bytes], T], body: bytes, refused: T) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor(), parse, body)
        except MemoryError:
            return refused
        except BrokenProcessPool:
            # The helper died (killed for its memory after all): the next body starts another.
            log.warning("the helper that parses large worker bodies ended; starting another")
            self._drop_pool()
            return refused

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_limit_memory,
                initargs=(self._memory_limit,),
            )
        return self._pool

    def _drop_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """At shutdown: the helper is ended (a body being parsed is dropped with it)."""
        self._drop_pool()
