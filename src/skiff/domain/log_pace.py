"""How fast a worker's output is copied into its log: a token bucket of bytes.

The server copies every worker's output itself (``services/log_writer.py``), on its event loop,
so a worker printing as fast as it can would spend the server's CPU, which every user shares, at
the rate of its own prints (a whole core for one worker, measured in docs/performance.md). A
worker may write ``burst`` bytes at once and ``rate`` bytes a second over time; past that, its
copier waits before reading more. A user's workers and pods together have a pace too
(``PacesByUser``): many workers do not multiply what one user's output may cost. Nothing is
dropped: the worker's output waits in its pipe, and a worker that keeps printing is held up in
its own ``write`` until the rate allows more.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The slowest pace ``SKIFF_LOG_BYTES_PER_SECOND`` may set: a worker that ends leaves at most its
#: pipe's and its reader's buffers unread (under 256 KiB), which this pace reads in about a
#: second, inside the 2 seconds its exit waits for its last lines (``providers/local.py``).
MIN_LOG_BYTES_PER_SECOND = 256 * 1024


@dataclass(slots=True)
class LogPace:
    """``rate`` bytes a second, ``burst`` at once; ``spend`` says how long to wait."""

    rate: float
    burst: float
    #: The bytes that may be written now without waiting (below 0: owed).
    tokens: float
    #: When ``tokens`` was last brought up to date (the caller's monotonic seconds).
    at: float

    @classmethod
    def full(cls, rate: float, burst: float, now: float) -> LogPace:
        if rate <= 0 or burst <= 0:
            raise ValueError("a log pace needs a rate and a burst above 0")
        return cls(rate=rate, burst=burst, tokens=burst, at=now)

    def spend(self, n: int, now: float) -> float:
        """Count ``n`` bytes written at ``now``: the seconds to wait before reading more (0
        while within the burst). Bytes already read are always written; the wait is what
        slows the worker down."""
        # A clock that stepped back counts as no time passed, never as tokens taken away.
        elapsed = max(0.0, now - self.at)
        self.tokens = min(self.burst, self.tokens + elapsed * self.rate) - n
        self.at = max(self.at, now)
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


class PacesByUser:
    """One pace per user, shared by all of that user's logs on this server, so that a user's
    output costs the server at most ``rate`` however many workers and pods they run. Each is
    made full at its user's first log and kept (a few numbers a user)."""

    def __init__(self, rate: float, burst: float) -> None:
        self._rate = rate
        self._burst = burst
        self._paces: dict[str, LogPace] = {}

    def of(self, user_id: str, now: float) -> LogPace:
        pace = self._paces.get(user_id)
        if pace is None:
            pace = self._paces[user_id] = LogPace.full(self._rate, self._burst, now)
        return pace
