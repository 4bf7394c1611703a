"""The singleton loops (the six named in ``app.py``: scaler, reaper, webhook sender, pod runner,
meter, load-balancing health check) run on exactly one replica: the one holding the cluster's
leader lock.

Every replica campaigns every ``interval`` seconds. The one that wins first takes up the lead
(``on_gain``: it resumes metering and cleans up after the replicas that died, their workers'
jobs going back to the queue), then starts the loops; while it leads it repeats the clean-up
alone (``on_sweep``) every ``sweep_every`` seconds — not ``on_gain`` whole, which would resume
metering anew each time (the time of a thing that began before the sweep would count from
it). A replica that loses the lock (its database session dropped) stops the loops at once and
then ``on_loss`` (it ends its own workers, so that only the new leader decides how many run); a
follower runs ``on_follow`` every ``sweep_every`` seconds (it forgets records of its own workers
that no process backs, e.g. exits it could not record while the database was away). With one
replica (SQLite) the lock is always this replica's, and this is simply "start the loops".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from attrs import define, field

from skiff.cluster.base import Cluster

log = logging.getLogger(__name__)

Loop = Callable[[], Coroutine[Any, Any, None]]
Hook = Callable[[], Awaitable[object]]


@define(eq=False, repr=False, slots=False)
class Leadership:
    _cluster: Cluster
    _loops: Mapping[str, Loop]
    _on_gain: Hook
    _on_loss: Hook
    _interval: float
    _on_sweep: Hook | None = None
    _on_follow: Hook | None = None
    _sweep_every: float = 5.0
    _tasks: list[asyncio.Task[None]] = field(init=False, factory=list)
    _lost: asyncio.Event = field(init=False, factory=asyncio.Event)
    _closing: bool = field(init=False, default=False)
    _next_sweep: float = field(init=False, default=0.0)

    @property
    def running_loops(self) -> bool:
        return bool(self._tasks)

    def lost(self) -> None:
        """Told by the cluster that its session dropped: stop leading now, not at the next
        campaign."""
        self._lost.set()

    async def run(self) -> None:
        while not self._closing:
            self._lost.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._lost.wait()
            if not self._closing:
                await self.step()

    async def step(self) -> None:
        """One campaign, and whatever follows from its outcome."""
        loop = asyncio.get_running_loop()
        try:
            leading = await self._cluster.campaign()
        except Exception:
            log.exception("the leader campaign failed; trying again")
            leading = False
        try:
            if leading and not self._tasks:
                log.info("this replica leads: starting %s", ", ".join(self._loops))
                await self._on_gain()
                self._next_sweep = loop.time() + self._sweep_every
                self._start_loops()
            elif leading and self._on_sweep is not None and loop.time() >= self._next_sweep:
                await self._on_sweep()
                self._next_sweep = loop.time() + self._sweep_every
            elif not leading and self._tasks:
                await self._step_down()
            elif not leading and self._on_follow is not None and loop.time() >= self._next_sweep:
                await self._on_follow()
                self._next_sweep = loop.time() + self._sweep_every
        except Exception:
            log.exception("taking up or giving up the lead failed; trying again")

    async def stop(self) -> None:
        """At shutdown: stop the loops and hand the lock over."""
        self._closing = True
        self._lost.set()
        await self._cancel_loops()
        with contextlib.suppress(Exception):
            await self._cluster.resign()

    def _start_loops(self) -> None:
        self._tasks = [asyncio.create_task(run(), name=name) for name, run in self._loops.items()]

    async def _step_down(self) -> None:
        log.warning("this replica lost the lead: stopping its loops and its workers")
        await self._cancel_loops()
        await self._on_loss()

    async def _cancel_loops(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
