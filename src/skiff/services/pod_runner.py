"""Running pods: the leader replica makes each pod's instance match what its record asks for.

A pass (``reconcile``) reads every pod: one that should run and has no instance here is started
on GPUs from the same pool as the serverless workers (held as ``pod:<id>``, so a pod never takes
a worker's GPU nor a worker a pod's); one whose ``version`` moved on (an update of what runs, a
reset) is started fresh; one whose ``restarts`` moved on is restarted in place; one stopped
(EXITED) or being deleted (TERMINATED) is ended, its GPUs freed, and a TERMINATED one's volume
and record removed. An instance that ends by itself is started again after a back-off, its exit
code recorded as the pod's ``problem`` meanwhile.

A pod of a disabled user is never left wanted running: each pass reads who is disabled (once,
from the store, so that whichever replica leads acts on what any replica recorded) and stops
their pods as their own stop would (``desiredStatus`` EXITED), locked or not. Enabling them
starts nothing: a pod runs again when its user starts it.

A start may pull an image for minutes: it runs in the background, and a pass does not wait for
it. Where the instance runs (owner, GPUs, host ports) is the runner's to record
(``Store.set_pod_placement``); the pods service never writes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

from attrs import define, field, setters

from skiff.clock import Clock
from skiff.domain.billing import UsageKind
from skiff.domain.containers import DEFAULT_FLAVOR, GIB, MEMORY_GB_PER_VCPU
from skiff.domain.endpoints import ComputeType
from skiff.domain.gpus import Gpu, choose
from skiff.domain.placement import describe_gpus
from skiff.domain.pods import DesiredStatus, Pod, PodPlacement, parse_port, runtime_status
from skiff.errors import Conflict
from skiff.providers.base import (
    LogSinks,
    PodExitCallback,
    PodInstance,
    PodLaunch,
    PodProvider,
    RegistryCredentials,
)
from skiff.services.gpus import GpuPool
from skiff.services.isolation import Isolation
from skiff.services.logs import WorkerLogs
from skiff.services.metering import UsageEnded, not_metered
from skiff.services.secrets import pod_env
from skiff.services.ssh_ports import SshPorts
from skiff.services.volumes import Volumes
from skiff.services.wakeups import Wake, Wakeups
from skiff.store.base import Store
from skiff.tenant_trees import remove_tree
from skiff.volume_dirs import VolumeDirs

log = logging.getLogger(__name__)

#: Makes the pod provider, given where its instances' exits and output go.
PodProviders = Callable[[PodExitCallback, LogSinks], PodProvider]

#: The folder of pods' volumes in ``SKIFF_VOLUMES_DIR`` (one directory per pod, named by its id;
#: a network volume's id is never this short).
POD_VOLUMES = "pods"
#: How often a pass runs without being woken (an instance that ended, a GPU that freed up).
PASS_SECONDS = 2.0
MAX_BACKOFF_SECONDS = 60.0


def public_host(base_url: str) -> str:
    """The address users reach pods' ports at: the host of the server's public URL (a
    wildcard one means this machine, reached at 127.0.0.1)."""
    host = urlsplit(base_url).hostname or ""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host


def gpu_holder(pod_id: str) -> str:
    """How a pod is named in the GPU pool (``skiff gpus`` shows it)."""
    return f"pod:{pod_id}"


def gpus_missing(pod: Pod, inventory: list[Gpu], free: list[Gpu]) -> str | None:
    """Why a GPU pod cannot start now, in words naming what is missing; None when it can."""
    spec = pod.spec
    if spec.computeType is not ComputeType.GPU:
        return None
    types = ", ".join(spec.gpuTypeIds) if spec.gpuTypeIds else "any type"
    wanted = f"{spec.gpuCount} GPU(s) of one type among [{types}]"
    if choose(spec.gpuTypeIds, spec.gpuCount, inventory) is None:
        return f"this server has no {wanted}: it has {describe_gpus(inventory)}"
    if choose(spec.gpuTypeIds, spec.gpuCount, free) is None:
        return f"no {wanted} is free now (free: {describe_gpus(free)})"
    return None


def _ssh_or_off(ports: SshPorts | None) -> SshPorts:
    return ports or SshPorts(None)


@define(eq=False, repr=False, slots=False, on_setattr=setters.NO_OP)
class PodRunner:
    _store: Store
    _clock: Clock
    _wakeups: Wakeups
    _gpus: GpuPool
    provider: PodProvider
    _logs: WorkerLogs
    #: Keeps each pod's volume.
    _pod_dirs: VolumeDirs
    #: Keeps each pod's scratch directory.
    _homes: Path
    _volumes: Volumes
    _replica_id: str
    _stop_grace: float = field(kw_only=True)
    #: The address users reach pods' ports at.
    public_host: str = field(kw_only=True)
    _usage_ended: UsageEnded = field(kw_only=True, default=not_metered)
    #: Who may run without a sandbox (services/isolation.py); None: nobody is held back.
    _isolation: Isolation | None = field(kw_only=True, default=None)
    #: Hands each running pod its own SSH port (None given: SSH is off).
    ssh_ports: SshPorts = field(kw_only=True, default=None, converter=_ssh_or_off)
    #: pod id -> its start under way.
    _starting: dict[str, asyncio.Task[None]] = field(init=False, factory=dict)
    #: pod id -> the ``restarts`` its instance reflects.
    _restarts: dict[str, int] = field(init=False, factory=dict)
    #: pod id -> (failed starts or exits in a row, not before).
    _backoff: dict[str, tuple[int, float]] = field(init=False, factory=dict)
    #: pod id -> when its instance started (an exit after a long run starts no back-off).
    _started_at: dict[str, float] = field(init=False, factory=dict)
    #: pod id -> why it last did not run (``_say``), shown again if a start's record lands
    #: after its instance has already ended.
    _problems: dict[str, str] = field(init=False, factory=dict)
    _lock: asyncio.Lock = field(init=False, factory=asyncio.Lock)
    leading: bool = field(init=False, default=False)
    #: pod id -> which start its running instance came from (``instance``), and the count.
    _instance: dict[str, int] = field(init=False, factory=dict)
    _starts: int = field(init=False, default=0)
    #: Pods whose GPUs a create or start took, while it writes that they are wanted running.
    _reserving: set[str] = field(init=False, factory=set)

    # -- what the pods service asks --------------------------------------------------------
    def reserve(self, pod: Pod) -> None:
        """Take the pod's GPUs now, or ``Conflict`` naming what is missing: a pod asked to run
        starts on GPUs free at that moment, or is refused (as on the hosted platform). Only
        the leader holds the pool; on another replica the leader places it when it can."""
        if not self.leading or pod.spec.computeType is not ComputeType.GPU:
            return
        holder = gpu_holder(pod.id)
        if any(a.worker_id == holder for a in self._gpus.assignments()):
            return
        missing = gpus_missing(pod, self._gpus.gpus, self._gpus.free())
        if missing is not None:
            raise Conflict(missing)
        self._gpus.allocate(holder, pod.spec.gpuTypeIds, pod.spec.gpuCount)

    def release(self, pod_id: str) -> None:
        """Give back GPUs reserved for a pod that was then not created or not started."""
        if pod_id not in self._starting and pod_id not in self._running_ids():
            self._gpus.release(gpu_holder(pod_id))

    @contextlib.contextmanager
    def reserving(self, pod: Pod) -> Iterator[None]:
        """``reserve`` for the write that asks the pod to run, given back if that write fails.
        Until it is written a pass still reads the pod as stopped (or not there): the pass
        leaves its GPUs meanwhile instead of taking them back to the pool."""
        self.reserve(pod)
        self._reserving.add(pod.id)
        try:
            yield
        except BaseException:
            self._reserving.discard(pod.id)
            self.release(pod.id)
            raise
        finally:
            self._reserving.discard(pod.id)

    # -- the leader's loop -----------------------------------------------------------------
    async def run(self) -> None:
        self.leading = True
        try:
            for instance in await self.provider.adopt():
                self._restarts[instance.pod_id] = await self._adopted(instance)
            await self.forget_lost()
            while not self._wakeups.closing:
                with self._wakeups.listen(Wake.PODS) as event:
                    try:
                        await self.reconcile()
                    except Exception:
                        log.exception("a pod pass failed")
                    # Not asyncio.wait_for: on 3.11 it swallows a cancellation that meets
                    # the event being set, and the loop would outlive the server's stop.
                    await self._wakeups.wait(event, PASS_SECONDS)
        finally:
            self.leading = False

    async def _adopted(self, instance: PodInstance) -> int:
        pod = await self._store.find_pod(instance.pod_id)
        if pod is None:
            return 0
        placement = pod.placement.model_copy(
            update={
                "owner": self._replica_id,
                "portMappings": instance.port_mappings,
                "host": instance.host,
                "version": instance.version,
                "restarts": pod.restarts,
                "sshPort": self.ssh_ports.take(pod.id, prefer=pod.placement.sshPort),
            }
        )
        if placement.gpuIds and instance.node and placement.gpuName:
            # On a cluster's machine: GPUs of its type on that machine, as this leader numbers
            # them (another leader's numbers may differ).
            held = self._gpus.hold(
                gpu_holder(pod.id), instance.node, placement.gpuName, len(placement.gpuIds)
            )
            if held is None:
                # Not free in the inventory: kept, its GPUs would be given out again. Ended;
                # the pass that follows starts it afresh where there is room.
                log.warning("pod %s: its GPUs could not be accounted for; starting it anew", pod.id)
                await self.provider.stop(pod.id, self._stop_grace)
                await self._store.set_pod_placement(pod.id, PodPlacement(), pod.lastStartedAt)
                return pod.restarts
            placement.gpuIds = [g.index for g in held]
        elif placement.gpuIds:
            # Its GPUs are held again, as they were when it started.
            by_index = {g.index: g for g in self._gpus.gpus}
            wanted = [by_index[i] for i in placement.gpuIds if i in by_index]
            if wanted and all(g in self._gpus.free() for g in wanted):
                self._gpus.allocate(gpu_holder(pod.id), [wanted[0].name], len(wanted))
        await self._store.set_pod_placement(pod.id, placement, pod.lastStartedAt)
        log.info("pod %s: its running container was adopted", pod.id)
        return pod.restarts

    async def forget_lost(self) -> None:
        """Placements this leader did not adopt belong to instances that are gone (a killed
        server's processes died with it; a leader that stepped down ended its own): cleared, so
        the pods show as starting until this leader has started them again."""
        adopted = self._running_ids()
        for pod in await self._store.list_pods(None):
            if pod.placement.owner and pod.id not in adopted:
                await self._store.set_pod_placement(pod.id, PodPlacement(), pod.lastStartedAt)

    async def reconcile(self) -> None:
        async with self._lock:
            pods = {p.id: p for p in await self._store.list_pods(None)}
            await self._stop_disabled_owners(pods)
            running = {i.pod_id: i for i in self.provider.running()}
            for pod_id, instance in running.items():
                pod = pods.get(pod_id)
                if pod is None or pod.desiredStatus is not DesiredStatus.RUNNING:
                    await self._stop(pod_id, pod)
                elif instance.version != pod.version:
                    log.info("pod %s: starting it fresh (version %d)", pod_id, pod.version)
                    await self._stop(pod_id, pod)
                elif self._restarts.get(pod_id, pod.restarts) != pod.restarts:
                    await self._restart(pod)
            for pod in pods.values():
                if pod.id in self._starting or pod.id in self._running_ids():
                    continue
                if pod.desiredStatus is DesiredStatus.RUNNING:
                    await self._begin(pod)
                    continue
                # Neither running nor wanted to: GPUs reserved when it was asked to run, and
                # stopped or deleted before a pass started it, go back to the pool; not those
                # of a start still being written.
                if pod.id not in self._reserving:
                    self._gpus.release(gpu_holder(pod.id))
                if pod.desiredStatus is DesiredStatus.TERMINATED:
                    await self._remove(pod)
                else:
                    # Stopped: a start the user asks for next tries at once.
                    self._backoff.pop(pod.id, None)

    async def _stop_disabled_owners(self, pods: dict[str, Pod]) -> None:
        """Mark the pods of disabled users that are wanted running as stopped, in ``pods``
        too, so that this pass ends their instances and starts none."""
        wanted = [p for p in pods.values() if p.desiredStatus is DesiredStatus.RUNNING]
        if not wanted:
            return
        disabled = await self._store.disabled_user_ids()
        for pod in wanted:
            if pod.userId not in disabled:
                continue
            stopped = await self._store.stop_running_pod(pod.id, self._clock.now())
            if stopped is not None:
                log.info("pod %s: stopped, its owner %s is disabled", pod.id, pod.userId)
                pods[pod.id] = stopped
            else:  # stopped or deleted meanwhile: as it is now
                found = await self._store.find_pod(pod.id)
                if found is None:
                    pods.pop(pod.id, None)
                else:
                    pods[pod.id] = found

    # -- starting --------------------------------------------------------------------------
    async def _begin(self, pod: Pod) -> None:
        failures = self._backoff.get(pod.id)
        if failures is not None and self._clock.now() < failures[1]:
            return
        sandboxed = True
        if self._isolation is not None:
            verdict = await self._isolation.verdict(self.provider, pod.userId)
            if verdict.refused is not None:
                await self._say(pod, verdict.refused)
                return
            sandboxed = verdict.sandboxed
        holder = gpu_holder(pod.id)
        held = [a.gpu for a in self._gpus.assignments() if a.worker_id == holder]
        if pod.spec.computeType is ComputeType.GPU and not held:
            missing = gpus_missing(pod, self._gpus.gpus, self._gpus.free())
            if missing is not None:
                await self._say(pod, missing)
                return
            held = self._gpus.allocate(holder, pod.spec.gpuTypeIds, pod.spec.gpuCount) or []
        try:
            launch = dataclasses.replace(await self._launch(pod, held), sandboxed=sandboxed)
        except Exception as exc:
            self._gpus.release(holder)
            await self._failed(pod, str(exc))
            return
        self._starting[pod.id] = asyncio.create_task(self._start(pod, launch, held))

    async def _start(self, pod: Pod, launch: PodLaunch, gpus: list[Gpu]) -> None:
        try:
            instance = await self.provider.start(launch)
        except asyncio.CancelledError:
            self._gpus.release(gpu_holder(pod.id))
            raise
        except Exception as exc:
            self._gpus.release(gpu_holder(pod.id))
            await self._failed(pod, str(exc))
            return
        finally:
            self._starting.pop(pod.id, None)
        self._restarts[pod.id] = pod.restarts
        self._started_at[pod.id] = self._clock.now()
        self._starts += 1
        self._instance[pod.id] = self._starts
        placement = PodPlacement(
            owner=self._replica_id,
            gpuName=gpus[0].name if gpus else None,
            gpuIds=[g.index for g in gpus],
            portMappings=instance.port_mappings,
            host=instance.host,
            version=pod.version,
            restarts=pod.restarts,
            sshPort=self.ssh_ports.take(pod.id),
        )
        if await self._store.set_pod_placement(pod.id, placement, self._clock.now()) is None:
            await self._stop(pod.id, None)  # deleted while it started
            return
        if pod.id not in self._running_ids():
            # It ended while this was written (a process that fails at once): its exit, told
            # meanwhile, would lie under a placement saying it runs until its next start.
            shown = PodPlacement(problem=self._problems.get(pod.id))
            await self._store.set_pod_placement(pod.id, shown, self._clock.now())
        self._wakeups.notify(Wake.PODS)

    async def _launch(self, pod: Pod, gpus: list[Gpu]) -> PodLaunch:
        spec = pod.spec
        if spec.networkVolumeId is not None:
            volume = await self._volumes.directory(pod.userId, spec.networkVolumeId)
            if volume is None:
                raise ValueError(f"network volume {spec.networkVolumeId} not found")
        else:
            volume = await asyncio.to_thread(self._pod_volume, pod.id) if spec.volumeInGb else None
        credentials = None
        if spec.containerRegistryAuthId:
            auth = await self._store.get_registry_auth(pod.userId, spec.containerRegistryAuthId)
            if auth is None:
                raise ValueError(
                    f"container registry auth {spec.containerRegistryAuthId} not found"
                )
            credentials = RegistryCredentials(auth.username, auth.password)
        home = self._homes / pod.id
        # A fresh instance: the scratch of the one before goes (its container disk, for a
        # process pod).
        await asyncio.to_thread(remove_tree, home)
        vcpus = memory = None
        if spec.computeType is ComputeType.CPU:
            flavor = spec.cpuFlavorIds[0] if spec.cpuFlavorIds else DEFAULT_FLAVOR
            vcpus, memory = spec.vcpuCount, spec.vcpuCount * MEMORY_GB_PER_VCPU[flavor] * GIB
        return PodLaunch(
            pod_id=pod.id,
            version=pod.version,
            image=spec.imageName,
            entrypoint=list(spec.dockerEntrypoint),
            command=list(spec.dockerStartCmd),
            env=await pod_env(self._store, pod.userId, self.environment(pod, gpus)),
            ports=tuple(spec.ports),
            volume=volume,
            mount_path=spec.volumeMountPath,
            home=home,
            gpu_indices=tuple(g.index for g in gpus),
            gpus=tuple(gpus),
            vcpus=vcpus,
            memory_bytes=memory,
            disk_gb=spec.containerDiskInGb or None,
            credentials=credentials,
            user_id=pod.userId,
        )

    def environment(self, pod: Pod, gpus: list[Gpu]) -> dict[str, str]:
        """The template's and the pod's variables, then what a pod on the hosted platform is
        told about itself, where it makes sense here (docs/pods.md)."""
        spec = pod.spec
        told = {
            "RUNPOD_POD_ID": pod.id,
            "RUNPOD_POD_HOSTNAME": socket.gethostname(),
            "RUNPOD_PUBLIC_IP": self.public_host,
            "RUNPOD_GPU_COUNT": str(len(gpus)),
            "RUNPOD_CPU_COUNT": str(spec.vcpuCount),
            "RUNPOD_VOLUME_MOUNT_PATH": spec.volumeMountPath,
            "PYTHONUNBUFFERED": "1",
        }
        if spec.computeType is ComputeType.CPU:
            told["CUDA_VISIBLE_DEVICES"] = ""
        return {**spec.env, **told}

    def _pod_volume(self, pod_id: str) -> Path:
        if self._pod_dirs.exists(pod_id):
            return self._pod_dirs.path(pod_id)
        return self._pod_dirs.make(pod_id)

    # -- restarting, stopping, removing ---------------------------------------------------
    async def _restart(self, pod: Pod) -> None:
        self._restarts[pod.id] = pod.restarts
        restarting = pod.placement.model_copy(update={"restarting": True, "portMappings": {}})
        await self._store.set_pod_placement(pod.id, restarting, pod.lastStartedAt)
        try:
            instance = await self.provider.restart(pod.id, self._stop_grace)
        except Exception as exc:
            # Ended instead: started fresh after the back-off, the failure shown meanwhile.
            await self._stop(pod.id, pod)
            await self._failed(pod, f"the restart failed: {exc}")
            return
        if instance is None:  # it had ended meanwhile: a pass starts it again
            await self._store.set_pod_placement(pod.id, PodPlacement(), pod.lastStartedAt)
            return
        placement = pod.placement.model_copy(
            update={
                "portMappings": instance.port_mappings,
                "restarting": False,
                "restarts": pod.restarts,
            }
        )
        await self._store.set_pod_placement(pod.id, placement, self._clock.now())

    async def _stop(self, pod_id: str, pod: Pod | None) -> None:
        starting = self._starting.pop(pod_id, None)
        if starting is not None:
            starting.cancel()
            await asyncio.wait({starting})
        await self.provider.stop(pod_id, self._stop_grace)
        # Its container disk goes with the instance, as on the hosted platform, rather than
        # at a next start that may not come: a stopped pod holds its volume, nothing more.
        await asyncio.to_thread(remove_tree, self.home(pod_id))
        self._gpus.release(gpu_holder(pod_id))
        self.ssh_ports.release(pod_id)
        self._restarts.pop(pod_id, None)
        self._started_at.pop(pod_id, None)
        if pod is not None:
            await self._store.set_pod_placement(pod_id, PodPlacement(), pod.lastStartedAt)
        await self._usage_ended(UsageKind.POD, pod_id)

    async def _remove(self, pod: Pod) -> None:
        await asyncio.to_thread(self._pod_dirs.remove, pod.id)
        await asyncio.to_thread(remove_tree, self._homes / pod.id)
        self._logs.remove(pod.id)
        self._backoff.pop(pod.id, None)
        self._problems.pop(pod.id, None)
        await self._store.delete_pod(pod.userId, pod.id)
        await self._usage_ended(UsageKind.POD_VOLUME, pod.id)

    async def on_exit(self, pod_id: str, code: int) -> None:
        """An instance ended by itself: its GPUs are free; it starts again after a back-off."""
        self._gpus.release(gpu_holder(pod_id))
        self.ssh_ports.release(pod_id)
        self._restarts.pop(pod_id, None)
        started = self._started_at.pop(pod_id, None)
        if started is not None and self._clock.now() - started > MAX_BACKOFF_SECONDS:
            self._backoff.pop(pod_id, None)  # it ran a good while: not a crash loop
        pod = await self._store.find_pod(pod_id)
        if pod is not None:
            await self._failed(pod, f"the pod's process exited with code {code}")
        await self._usage_ended(UsageKind.POD, pod_id)
        self._wakeups.notify(Wake.PODS)

    async def _failed(self, pod: Pod, problem: str) -> None:
        failures = self._backoff.get(pod.id, (0, 0.0))[0] + 1
        delay = min(MAX_BACKOFF_SECONDS, 2.0 ** (failures - 1))
        self._backoff[pod.id] = (failures, self._clock.now() + delay)
        log.warning("pod %s: %s (next try in %.0f s)", pod.id, problem, delay)
        await self._say(pod, f"{problem}; it starts again in {delay:.0f} s")

    async def _say(self, pod: Pod, problem: str) -> None:
        self._problems[pod.id] = problem
        if pod.placement.problem != problem or pod.placement.owner:
            placement = PodPlacement(problem=problem)
            await self._store.set_pod_placement(pod.id, placement, pod.lastStartedAt)

    def _running_ids(self) -> set[str]:
        return {i.pod_id for i in self.provider.running()}

    def running_ids(self) -> list[str]:
        """The pods whose instance runs on this replica."""
        return sorted(self._running_ids())

    def instance(self, pod_id: str) -> int | None:
        """Which start the pod's running instance came from: what ``evict`` is told, so that
        a measure of one instance never ends the next (after a reset, or a crash and a fresh
        start). None while none of this replica's starts runs."""
        return self._instance.get(pod_id) if pod_id in self._running_ids() else None

    def home(self, pod_id: str) -> Path:
        """A process pod's home: its container disk."""
        return self._homes / pod_id

    def volume_dir(self, pod_id: str) -> Path:
        """Where the pod's own volume (``volumeInGb``) is, made or not."""
        return self._pod_dirs.path(pod_id)

    async def evict(self, pod_id: str, instance: int, problem: str) -> None:
        """End the pod's ``instance`` for what it did (it filled its container disk): its disk
        wiped at once, the pod's problem saying why, and started afresh after the back-off of
        one that exited. Nothing when that instance no longer runs, or the pod is no longer
        meant to (its user stopped it meanwhile)."""
        async with self._lock:
            pod = await self._store.find_pod(pod_id)
            if pod is None or pod.desiredStatus is not DesiredStatus.RUNNING:
                return
            if self.instance(pod_id) != instance:
                return
            started = self._started_at.get(pod_id)
            if started is not None and self._clock.now() - started > MAX_BACKOFF_SECONDS:
                self._backoff.pop(pod_id, None)  # it ran a good while: not a crash loop
            await self._stop(pod_id, pod)
            await self._failed(pod, problem)
        self._wakeups.notify(Wake.PODS)

    async def abandon(self) -> None:
        """This replica no longer leads: its pods' instances end (the next leader starts them
        again), so that one replica alone runs each pod."""
        for task in list(self._starting.values()):
            task.cancel()
        for instance in self.provider.running():
            await self._stop(instance.pod_id, await self._store.find_pod(instance.pod_id))

    async def shutdown(self) -> None:
        for task in list(self._starting.values()):
            task.cancel()
        if self._starting:
            await asyncio.wait(set(self._starting.values()), timeout=10)
        await self.provider.close()

    def host_of(self, pod: Pod) -> str:
        """The address users reach the pod's ports at: its machine's when it runs on another
        (a Ray node), else the server's public host."""
        return pod.placement.host or self.public_host

    def ssh_address(self, pod: Pod) -> tuple[str, int] | None:
        """Where SSH reaches the running pod with any user name (its own port); None when it
        has none (SSH off, not running, no port left)."""
        if pod.placement.sshPort is None or runtime_status(pod) != "running":
            return None
        return self.host_of(pod), pod.placement.sshPort

    def port_url(self, pod: Pod, port: str, host_port: int) -> str | None:
        """The URL of an ``http`` port as users reach it; None for a ``tcp`` one."""
        if parse_port(port).protocol.value != "http":
            return None
        return f"http://{self.host_of(pod)}:{host_port}"
