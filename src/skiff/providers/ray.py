"""Workers placed on a Ray cluster (``SKIFF_PROVIDER=ray``, ``SKIFF_RAY_ADDRESS``).

The leader connects to the cluster as a Ray driver (``ray_cluster.py``) and places each worker
as a detached, named actor (``skiff-worker-<id>`` in the installation's namespace) that runs the
worker's command on its node (``ray_actor.WorkerProcess``): the same command and environment the
local provider runs, with the node's own environment beneath. A GPU worker reserves its GPUs
through Ray's resources, ``num_gpus`` and the custom resource of its type,
``skiff_gpu:<gpuTypeId>``, which each node declares (``ray start --num-gpus 2 --resources
'{"skiff_gpu:NVIDIA L4": 2}'``), on the node skiff chose for it; ``CUDA_VISIBLE_DEVICES`` is the
one Ray assigns the actor. A CPU worker reserves its endpoint's vCPUs, on any node (spread).

Being detached and named, the actors outlive the leader that placed them: the next leader finds
them (``found``) and takes them over (``take_over``). A worker's output waits in its actor until
the leader reads it, streamed into the worker's log here. When a worker's actor dies (its node
died, or it was killed) its exit is reported like a process's, and the fleet does the rest: the
jobs it held go back to the queue and the scaler places a replacement where there is room.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from skiff.domain.gpus import Gpu
from skiff.providers.base import ExitCallback, FoundWorker, Launch, LogSinks, ServedAt
from skiff.providers.ray_cluster import NOT_SANDBOXED, Followed, Placed, RayConnection

log = logging.getLogger(__name__)

ACTOR_PREFIX = "skiff-worker-"


def actor_name(worker_id: str) -> str:
    return f"{ACTOR_PREFIX}{worker_id}"


class RayProvider:
    """``placement_seconds``: how long a worker may wait to be placed before its start counts
    as failed."""

    #: The template's command runs on the node; its image is not used (docs/ray.md says what
    #: running images would take).
    runs_images = False
    #: Placing an actor takes a moment, or long when the cluster is busy: starts run in the
    #: background.
    slow_starts = True

    def __init__(
        self,
        connection: RayConnection,
        on_exit: ExitCallback,
        *,
        logs: LogSinks,
        placement_seconds: float = 60.0,
        cwd: str | None = None,
    ) -> None:
        self.connection = connection
        self._placement_seconds = placement_seconds
        self._cwd = cwd or os.getcwd()
        self._followed = Followed(connection, logs, on_exit)
        self._served: dict[str, ServedAt] = {}
        self._endpoints: dict[str, str] = {}
        self._found: dict[str, tuple[Any, FoundWorker]] = {}

    # -- the cluster (SpansMachines) --------------------------------------------------------

    async def gpu_inventory(self) -> list[Gpu]:
        return await self.connection.gpu_inventory()

    async def worker_limit(self) -> int:
        return await self.connection.worker_limit()

    async def unreachable(self, url: str) -> list[str]:
        return await self.connection.unreachable(url)

    # -- workers ----------------------------------------------------------------------------

    async def start(self, launch: Launch) -> int:
        gpus = launch.gpus
        spec = {
            "worker_id": launch.worker_id,
            "endpoint_id": launch.endpoint_id,
            "argv": launch.argv,
            "env": launch.env,
            "gpu_type": gpus[0].name if gpus else None,
            "gpu_count": len(gpus),
            "port": launch.serves.port if launch.serves else None,
            "health_port": launch.serves.health_port if launch.serves else None,
            "cwd": str(launch.cwd) if launch.cwd else self._cwd,
        }
        actor, placed = await self.connection.place(
            actor_name(launch.worker_id), spec, gpus, launch.vcpus, self._placement_seconds
        )
        self._follow(launch.worker_id, launch.endpoint_id, actor, placed)
        log.info(
            "worker %s placed on Ray node %s (%s)%s",
            launch.worker_id,
            placed.node[:12],
            placed.node_ip,
            f", CUDA_VISIBLE_DEVICES={placed.info['gpu_ids']}" if gpus else "",
        )
        return int(placed.pid or 0)

    def _follow(self, worker_id: str, endpoint_id: str, actor: Any, placed: Placed) -> None:
        served = served_at(placed)
        if served is not None:
            self._served[worker_id] = served
        self._endpoints[worker_id] = endpoint_id
        self._followed.follow(worker_id, actor, endpoint_id)

    async def stop(self, worker_id: str, grace: float) -> None:
        if worker_id not in self._followed:
            found = self._found.pop(worker_id, None)
            if found is not None:
                self.connection.kill(found[0])
            return
        await self._followed.stop(worker_id, grace)

    async def stop_all(self, grace: float) -> None:
        await asyncio.gather(*(self.stop(w, grace) for w in self._followed.ids()))

    def running(self) -> list[str]:
        return self._followed.ids()

    def served_at(self, worker_id: str) -> ServedAt | None:
        return self._served.get(worker_id) if worker_id in self._followed else None

    def worker_url(self, base_url: str) -> str:
        # SKIFF_PUBLIC_URL, which every node must reach (checked at start: ``unreachable``).
        return base_url

    def host_environment(self) -> dict[str, str]:
        # The node's own environment is beneath the worker's, there (ray_actor.py).
        return {}

    async def sandbox_problem(self) -> str | None:
        return NOT_SANDBOXED

    async def volume_mount_problem(self) -> str | None:
        return (
            "network volumes are not mounted on Ray nodes: with SKIFF_PROVIDER=ray an endpoint "
            "runs without one (docs/ray.md)"
        )

    def kill_leftover(self, worker_id: str, pid: int) -> bool:
        actor = self.connection.get(actor_name(worker_id))
        if actor is None:
            return False
        self.connection.kill(actor)
        return True

    # -- taking over from an earlier leader -------------------------------------------------

    async def found(self) -> list[FoundWorker]:
        found = []
        for worker_id, actor, placed in await self._followed.unfollowed(ACTOR_PREFIX):
            worker = FoundWorker(
                worker_id=worker_id,
                endpoint_id=placed.info["endpoint_id"],
                pid=placed.pid,
                node=placed.node,
                gpu_type=placed.info["gpu_type"],
                gpu_count=placed.info["gpu_count"],
                served=served_at(placed),
            )
            self._found[worker_id] = (actor, worker)
            found.append(worker)
        return found

    async def take_over(self, worker_id: str) -> None:
        actor, worker = self._found.pop(worker_id)
        # What it wrote while no leader read it is read from what the actor kept.
        self._followed.follow(worker_id, actor, worker.endpoint_id)
        if worker.served is not None:
            self._served[worker_id] = worker.served


def served_at(placed: Placed) -> ServedAt | None:
    """Where a load-balancing worker's ports are reached: its node's address."""
    ports = placed.info.get("ports")
    if not ports:
        return None
    return ServedAt(f"{placed.node_ip}:{ports[0]}", f"{placed.node_ip}:{ports[1]}")
