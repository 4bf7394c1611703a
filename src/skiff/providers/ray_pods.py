"""Pods placed on a Ray cluster (``SKIFF_PROVIDER=ray``): each pod's instance is a detached,
named actor (``skiff-pod-<id>``) running the pod's ``dockerEntrypoint + dockerStartCmd`` on a
node, as a process pod runs on this host (``local_pods.py``): its GPUs reserved through Ray's
resources on the node skiff chose, or its vCPUs on any node; its ports the ones it opens on its
node, reached at the node's address; its output streamed into its log. A restart stops and
starts the process inside the same actor, on the same node. Like containers, the instances
outlive the server: the next leader takes them over (``adopt``).

A pod's volume is not mounted on a Ray node (the nodes share no disk with the server): a pod
with one is refused at its start, saying so (docs/ray.md). The image is not used.
"""

from __future__ import annotations

import logging
from typing import Any

from skiff.domain.pod_sessions import EntryRequest
from skiff.domain.pods import PodSpec, parse_port
from skiff.providers.base import (
    EntryRefused,
    LogSinks,
    PodEntry,
    PodExitCallback,
    PodInstance,
    PodLaunch,
    WorkerStartError,
)
from skiff.providers.pod_commands import process_argv
from skiff.providers.ray_cluster import NOT_SANDBOXED, Followed, Placed, RayConnection

log = logging.getLogger(__name__)

ACTOR_PREFIX = "skiff-pod-"


def actor_name(pod_id: str) -> str:
    return f"{ACTOR_PREFIX}{pod_id}"


class RayPodProvider:
    def __init__(
        self,
        connection: RayConnection,
        on_exit: PodExitCallback,
        *,
        logs: LogSinks,
        placement_seconds: float = 60.0,
    ) -> None:
        self._connection = connection
        self._placement_seconds = placement_seconds
        self._followed = Followed(connection, logs, self._ended)
        self._on_exit = on_exit
        self._instances: dict[str, PodInstance] = {}

    async def _ended(self, pod_id: str, code: int) -> None:
        self._instances.pop(pod_id, None)
        await self._on_exit(pod_id, code)

    async def start(self, launch: PodLaunch) -> PodInstance:
        argv = process_argv(launch, runs_as="a pod on a Ray node", provider="Ray")
        if launch.volume is not None:
            raise WorkerStartError(
                "a pod on a Ray node has no volume (the nodes share no disk with the server): "
                "create it with volumeInGb 0 and no networkVolumeId"
            )
        gpus = launch.gpus
        spec = {
            "worker_id": launch.pod_id,
            "endpoint_id": launch.pod_id,
            "argv": argv,
            "env": launch.env | {"HOME": str(launch.home.resolve())},
            "gpu_type": gpus[0].name if gpus else None,
            "gpu_count": len(gpus),
            "port": None,
            "health_port": None,
            "cwd": None,
            "version": launch.version,
            "pod_ports": list(launch.ports),
        }
        actor, placed = await self._connection.place(
            actor_name(launch.pod_id), spec, gpus, launch.vcpus, self._placement_seconds
        )
        instance = _instance(launch.pod_id, placed)
        self._instances[launch.pod_id] = instance
        self._followed.follow(launch.pod_id, actor, launch.pod_id)
        log.info(
            "pod %s placed on Ray node %s (%s)", launch.pod_id, placed.node[:12], placed.node_ip
        )
        return instance

    async def restart(self, pod_id: str, grace: float) -> PodInstance | None:
        instance = self._instances.get(pod_id)
        if instance is None:
            return None
        if not await self._followed.restart(pod_id, grace):
            raise WorkerStartError(f"pod {pod_id} could not be started again on its node")
        return instance

    async def stop(self, pod_id: str, grace: float) -> None:
        if self._instances.pop(pod_id, None) is None:
            return
        await self._followed.stop(pod_id, grace, quiet=True)

    def command_problem(self, spec: PodSpec) -> str | None:
        # Whether the program is there is for the node to say: it is not this host.
        if not spec.dockerEntrypoint and not spec.dockerStartCmd:
            return (
                "a pod on a Ray node runs its dockerEntrypoint and "
                "dockerStartCmd, not its image's, and this pod has neither"
            )
        return None

    def ports_problem(self, spec: PodSpec) -> str | None:
        return None  # served on a node's ports, which are for the node to say

    async def sandbox_problem(self) -> str | None:
        return NOT_SANDBOXED

    async def enter(self, pod_id: str, request: EntryRequest) -> PodEntry:
        # A Ray node's processes are reached through Ray's own calls, not a terminal: not
        # served (docs/pods.md says so).
        raise EntryRefused(
            "SSH and the console's terminal reach local and Docker pods; this pod runs on a "
            "Ray node (SKIFF_PROVIDER=ray), which they do not reach"
        )

    def running(self) -> list[PodInstance]:
        return list(self._instances.values())

    async def adopt(self) -> list[PodInstance]:
        adopted = []
        for pod_id, actor, placed in await self._followed.unfollowed(ACTOR_PREFIX):
            instance = _instance(pod_id, placed)
            self._instances[pod_id] = instance
            self._followed.follow(pod_id, actor, pod_id)
            adopted.append(instance)
        return adopted

    async def close(self) -> None:
        # Left running, like containers: the next leader takes them over. Only the following
        # of them ends here.
        self._instances.clear()
        await self._followed.forget()


def _instance(pod_id: str, placed: Placed) -> PodInstance:
    info: dict[str, Any] = placed.info
    ports = {p: parse_port(p).number for p in info.get("pod_ports") or []}
    gpus = info.get("gpu_count") or 0
    return PodInstance(
        pod_id,
        int(info.get("version") or 0),
        ports,
        host=placed.node_ip,
        node=placed.node if gpus else "",
    )
