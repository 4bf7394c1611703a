"""A stream handed to an answer whose resources (a connection to another replica, a caller's
concurrency slot) must be let go however the answer ends.

Starlette reads a streamed answer's iterator and never closes it: a reader gone before the
first chunk leaves an async generator unstarted, so its ``finally`` never runs. This iterator
lets go at its end, on an error or a cancel while it is read, on ``aclose``, or, dropped
unread, soon after (a task on the running loop).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Generic, TypeVar

T = TypeVar("T")


class ClosingStream(Generic[T]):
    def __init__(self, chunks: AsyncIterator[T], held: contextlib.AsyncExitStack) -> None:
        self._chunks = chunks
        self._held: contextlib.AsyncExitStack | None = held

    def __aiter__(self) -> ClosingStream[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self._chunks.__anext__()
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            close = getattr(self._chunks, "aclose", None)
            try:
                if close is not None:
                    await close()
            finally:
                await held.aclose()

    def __del__(self) -> None:
        if self._held is not None:
            with contextlib.suppress(RuntimeError):  # no loop: the process is ending
                asyncio.get_running_loop().create_task(self.aclose())
