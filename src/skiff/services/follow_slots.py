"""How many followed logs one user may hold open on a replica at once.

A followed log (``?follow=true``, the console's live log) holds a connection for as long as
its reader keeps it, and, relayed from a follower to the leader, a second one between them.
Without a bound one user could hold as many as the server has open files; with it, each user
has ``MAX_FOLLOWS_PER_USER`` here, and a follow past that is answered 429.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

from skiff.closing_stream import ClosingStream
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

    def hold(self, user_id: str, follow: AsyncIterator[T]) -> ClosingStream[T]:
        """``follow``, holding one of the user's slots until it ends, is closed, or is dropped
        unread (``ClosingStream``)."""
        self._open[user_id] = self._open.get(user_id, 0) + 1
        slot = contextlib.AsyncExitStack()
        slot.callback(self._give_back, user_id)
        return ClosingStream(follow, slot)

    def _give_back(self, user_id: str) -> None:
        left = self._open[user_id] - 1
        if left:
            self._open[user_id] = left
        else:
            del self._open[user_id]
