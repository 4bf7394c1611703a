"""How many followed logs one user may hold open on a replica at once.

A followed log (``?follow=true``, the console's live log) holds a connection for as long as
its reader keeps it, and, relayed from a follower to the leader, a second one between them.
Without a bound one user could hold as many as the server has open files; with it, each user
has ``MAX_FOLLOWS_PER_USER`` here, and a follow past that is answered 429.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Generic, TypeVar

from skiff.errors import TooManyRequests

T = TypeVar("T")

#: Followed logs, of endpoints and pods together, one user holds open on one replica.
MAX_FOLLOWS_PER_USER = 16
#: What a refused reader is told to wait: a follow ends when its reader leaves.
RETRY_AFTER_SECONDS = 10


class FollowSlots:
    def __init__(self, most: int = MAX_FOLLOWS_PER_USER) -> None:
        self._most = most
        #: user id -> followed logs open now.
        self._open: dict[str, int] = {}

    def open_of(self, user_id: str) -> int:
        return self._open.get(user_id, 0)

    def check(self, user_id: str) -> None:
        """Refuse (429) a new follow of a user who holds the most already: asked before the
        follow is opened. Follows opened side by side may each pass it: by the few in flight."""
        held = self._open.get(user_id, 0)
        if held >= self._most:
            raise TooManyRequests(
                f"this user follows {held} logs on this server already, the most at once: "
                "close one first",
                RETRY_AFTER_SECONDS,
            )

    def hold(self, user_id: str, follow: AsyncIterator[T]) -> Held[T]:
        """``follow``, holding one of the user's slots until it ends, is closed, or is dropped
        unread."""
        self._open[user_id] = self._open.get(user_id, 0) + 1
        return Held(follow, lambda: self._give_back(user_id))

    def _give_back(self, user_id: str) -> None:
        left = self._open[user_id] - 1
        if left:
            self._open[user_id] = left
        else:
            del self._open[user_id]


class Held(Generic[T]):
    """An iterator that gives its slot back once, whichever way it stops: its end, an error
    or a cancel while it is read, ``aclose``, or being dropped unread (a reader gone before
    the first line: nothing else would ever close it)."""

    def __init__(self, inner: AsyncIterator[T], give_back: Callable[[], None]) -> None:
        self._inner = inner
        self._give_back: Callable[[], None] | None = give_back

    def __aiter__(self) -> Held[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self._inner.__anext__()
        except BaseException:
            self._release()
            raise

    async def aclose(self) -> None:
        self._release()
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()

    def _release(self) -> None:
        give_back, self._give_back = self._give_back, None
        if give_back is not None:
            give_back()

    def __del__(self) -> None:
        self._release()
