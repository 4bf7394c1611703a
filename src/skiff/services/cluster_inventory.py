"""The GPUs and worker limit of a provider that places workers across a cluster (the Ray
provider), kept up to date on every replica (the leader places workers on them, every replica
shows them and says why a worker waits): a machine that joins adds its GPUs (and throttled
workers may start on them), one that leaves takes its GPUs away. Once, at start, it also checks
that every machine reaches the server's URL, which the workers there call."""

from __future__ import annotations

import asyncio
import logging

from attrs import define

from skiff.providers.base import SpansMachines
from skiff.services.fleet import Fleet
from skiff.services.gpus import GpuPool
from skiff.services.wakeups import Wake, Wakeups

log = logging.getLogger(__name__)

#: How often the leader reads the cluster's machines again.
REFRESH_SECONDS = 2.0


@define(eq=False, repr=False, slots=False)
class ClusterInventory:
    _cluster: SpansMachines
    _gpus: GpuPool
    _fleet: Fleet
    _wakeups: Wakeups
    #: The server as workers call it.
    _server_url: str
    #: The worker limit is the operator's (``SKIFF_MAX_WORKERS``), not the cluster's.
    _fixed_limit: bool
    _interval: float = REFRESH_SECONDS

    async def refresh(self) -> None:
        """Read the cluster's GPUs and capacity again; a change wakes the scaler."""
        if self._gpus.replace(await self._cluster.gpu_inventory()):
            counts: dict[str, int] = {}
            for gpu in self._gpus.gpus:
                counts[gpu.name] = counts.get(gpu.name, 0) + 1
            shown = ", ".join(f"{n} x {name}" for name, n in counts.items()) or "no GPUs"
            log.info("the cluster's GPUs: %s", shown)
            self._wakeups.notify(Wake.SCALER)
        if not self._fixed_limit:
            self._fleet.worker_limit = await self._cluster.worker_limit()

    async def check_reach(self) -> list[str]:
        """Whether every machine reaches the server: logged, and returned (what failed where)."""
        url = f"{self._server_url}/healthz"
        problems = await self._cluster.unreachable(url)
        for problem in problems:
            log.warning(
                "%s cannot reach the server at %s (SKIFF_PUBLIC_URL): workers placed there "
                "cannot take jobs; set SKIFF_PUBLIC_URL to an address every node reaches. %s",
                problem.split(":", 1)[0],
                url,
                problem,
            )
        if not problems:
            log.info("every node of the cluster reaches the server at %s", url)
        return problems

    async def run(self) -> None:
        # Checked once, in the background: a node that cannot reach the server takes a while
        # to say so.
        checking = asyncio.create_task(self._check_quietly())
        try:
            while True:
                try:
                    await self.refresh()
                except Exception:
                    log.exception("reading the cluster's machines failed; trying again")
                await asyncio.sleep(self._interval)
        finally:
            checking.cancel()

    async def _check_quietly(self) -> None:
        try:
            await self.check_reach()
        except Exception:
            log.exception("checking that the cluster reaches the server failed")
