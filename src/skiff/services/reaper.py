"""Periodic clean-up: jobs whose worker stopped answering go back to the queue, and external
workers that stopped calling in are forgotten."""

from __future__ import annotations

import asyncio
import logging

from skiff.services.dispatch import Dispatch

log = logging.getLogger(__name__)


class Reaper:
    def __init__(self, dispatch: Dispatch, interval: float, worker_silence: float) -> None:
        self._dispatch = dispatch
        self._interval = interval
        self._worker_silence = worker_silence

    async def run(self) -> None:
        while True:
            try:
                await self.pass_once()
            except Exception:
                log.exception("the reaper pass failed; trying again")
            await asyncio.sleep(self._interval)

    async def pass_once(self) -> None:
        await self._dispatch.release_expired_leases()
        await self._dispatch.forget_silent_workers(self._worker_silence)
