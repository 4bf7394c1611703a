"""The connection to a Ray cluster, shared by the Ray worker and pod providers (``ray.py``,
``ray_pods.py``): the nodes and their GPUs, and the detached, named actors that run workers' and
pods' processes on them (``ray_actor.WorkerProcess``), followed from here.

Ray is an optional dependency (``pip install 'skiff[ray]'``), imported only once connecting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from attrs import define, field

from skiff.domain.gpus import Gpu
from skiff.providers import ray_actor
from skiff.providers.base import LogSink, LogSinks, WorkerStartError
from skiff.providers.capacity import worker_limit

log = logging.getLogger(__name__)

#: Why other users' workers and pods do not start on a Ray cluster: its nodes run them as plain
#: processes of the node's user, with no sandbox yet (docs/ray.md), so only the
#: administrator's run there (the rule of providers/bubblewrap.py for a host without one).
NOT_SANDBOXED = (
    "workers and pods on Ray nodes run without a sandbox, so only the administrator's start "
    "there; run other users' endpoints with SKIFF_PROVIDER=local or docker, or set "
    "SKIFF_SANDBOX=off if every user of this server is trusted"
)

#: The custom resource a node declares for each GPU type it has: ``skiff_gpu:<gpuTypeId>``.
GPU_RESOURCE = "skiff_gpu:"
#: How long one read of a process's output waits for some.
READ_WAIT_SECONDS = 1.0
#: Concurrent calls an actor serves: a read waiting for output, a stop, a describe.
ACTOR_CONCURRENCY = 4
#: The exit code reported for a process whose actor died (its node died, or it was killed).
ACTOR_LOST = -9
#: How long the server tries to open a connection to the cluster's address at its start.
CONNECT_SECONDS = 10.0
#: How long an actor found running is given to say what it is before it is ended.
DESCRIBE_SECONDS = 10.0
#: How long reading a process's output may keep failing (the connection to the cluster
#: interrupted, the actor briefly unreachable) before its actor counts as lost.
READ_FAILURES_SECONDS = 30.0
#: How long a node is given to reach the server's URL (it may still be starting).
REACH_SECONDS = 15.0

#: Told (name, exit code) when a followed process ends by itself or its actor dies.
Ended = Callable[[str, int], Awaitable[None]]


def _resolved(ref: Any) -> Awaitable[Any]:
    """An ObjectRef as something the running loop awaits (and a timeout cancels)."""
    future: concurrent.futures.Future[Any] = ref.future()
    return asyncio.wrap_future(future)


async def call(ref: Any, timeout: float | None = None) -> Any:
    """The result of a remote call, awaited on the running loop."""
    if timeout is None:
        return await _resolved(ref)
    async with asyncio.timeout(timeout):
        return await _resolved(ref)


def _died(exc: BaseException) -> bool:
    """Whether a failed call says the actor is dead for good (its node died, it was killed),
    rather than out of reach for a moment."""
    from ray.exceptions import ActorDiedError

    return isinstance(exc, ActorDiedError)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


@dataclass(frozen=True, slots=True)
class Placed:
    """A process's actor as it describes itself (``WorkerProcess.describe``)."""

    name: str
    node: str
    node_ip: str
    pid: int | None
    info: dict[str, Any]


class RayConnection:
    """``address``: ``ray://host:10001`` (Ray Client) or the head's ``host:port`` on a machine
    that is a Ray node itself; ``namespace``: this installation's, apart from others sharing
    the cluster."""

    def __init__(self, address: str, namespace: str) -> None:
        self.address = address
        self.namespace = namespace
        self._ray: Any = None
        self._actor_class: Any = None
        #: Set once the server stops: what then fails is the connection going, not an actor.
        self.closing = False
        #: (node, GPU type, ordinal on the node) -> the index skiff numbers the GPU by, stable
        #: while this server runs, so that nodes coming and going never renumber the others.
        self._numbers: dict[tuple[str, str, int], int] = {}

    @property
    def ray(self) -> Any:
        if self._ray is None:
            raise RuntimeError("not connected to the Ray cluster yet")
        return self._ray

    def connect(self) -> None:
        """Join the cluster as a driver (blocking: done once, at start). ``ClusterUnreachable``
        when nothing answers at the address: Ray itself would retry for minutes."""
        import ray
        import ray.cloudpickle

        problem = _unreachable(self.address)
        if problem is not None:
            raise ClusterUnreachable(
                f"cannot reach the Ray cluster at {self.address} (SKIFF_RAY_ADDRESS): {problem}"
            )

        if not ray.is_initialized():
            # Ray takes over SIGTERM (and its core, SIGINT's report) for a driver: the server's
            # own handlers, which stop it gracefully, are put back.
            kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
            try:
                ray.init(
                    address=self.address,
                    namespace=self.namespace,
                    # Processes' output comes through their logs, not the server's console.
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
            finally:
                if threading.current_thread() is threading.main_thread():
                    for sig, handler in kept.items():
                        if handler is not None:
                            signal.signal(sig, handler)
        # Sent by value: the nodes need Ray, not skiff.
        ray.cloudpickle.register_pickle_by_value(ray_actor)  # type: ignore[no-untyped-call]
        self._ray = ray
        self._actor_class = ray.remote(ray_actor.WorkerProcess)
        log.info("connected to the Ray cluster at %s", self.address)

    def close(self) -> None:
        self.closing = True
        if self._ray is not None and self._ray.is_initialized():
            self._ray.shutdown()

    # -- nodes ------------------------------------------------------------------------------

    def _alive_nodes(self) -> list[dict[str, Any]]:
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        return sorted(nodes, key=lambda n: str(n["NodeID"]))

    async def gpu_inventory(self) -> list[Gpu]:
        return self.number(await asyncio.to_thread(self._alive_nodes))

    def number(self, nodes: Iterable[dict[str, Any]]) -> list[Gpu]:
        """Every GPU the nodes declare (``skiff_gpu:<type>``), numbered stably."""
        gpus = []
        for node in nodes:
            node_id = str(node["NodeID"])
            for resource, amount in sorted(node.get("Resources", {}).items()):
                if not resource.startswith(GPU_RESOURCE):
                    continue
                name = resource.removeprefix(GPU_RESOURCE)
                for ordinal in range(int(amount)):
                    index = self._numbers.setdefault((node_id, name, ordinal), len(self._numbers))
                    gpus.append(Gpu(index=index, name=name, node=node_id))
        return sorted(gpus, key=lambda g: g.index)

    async def holders(
        self, kinds: dict[str, Callable[[Placed], str]]
    ) -> list[tuple[Gpu, str | None]]:
        """Every GPU of the cluster with what holds it, as the cluster itself says (``skiff
        gpus`` on a Ray cluster): the actors whose names start with a prefix of ``kinds``, by
        their node and GPU type, each named by the prefix's function."""
        gpus = await self.gpu_inventory()
        free: dict[tuple[str, str], list[Gpu]] = {}
        for gpu in gpus:
            free.setdefault((gpu.node, gpu.name), []).append(gpu)
        held: dict[int, str] = {}
        for prefix, named in kinds.items():
            for _actor, placed in await self.find(prefix):
                count = int(placed.info.get("gpu_count") or 0)
                mine = free.get((placed.node, str(placed.info.get("gpu_type"))), [])
                for gpu in mine[:count]:
                    held[gpu.index] = named(placed)
                del mine[:count]
        return [(gpu, held.get(gpu.index)) for gpu in gpus]

    async def worker_limit(self) -> int:
        resources = await asyncio.to_thread(self.ray.cluster_resources)
        memory = resources.get("memory")
        return worker_limit(int(resources.get("CPU", 1)), int(memory) if memory else None)

    async def unreachable(self, url: str) -> list[str]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        probe = self.ray.remote(num_cpus=0)(ray_actor.reaches)
        nodes = await asyncio.to_thread(self._alive_nodes)
        refs = [
            probe.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(str(n["NodeID"]), soft=False)
            ).remote(url, REACH_SECONDS)
            for n in nodes
        ]
        problems = []
        for node, ref in zip(nodes, refs, strict=True):
            where = f"node {node['NodeID'][:12]} ({node.get('NodeManagerAddress', '?')})"
            try:
                problem = await call(ref, REACH_SECONDS + 30)
            except Exception as exc:  # the probe could not run there at all
                problem = f"the check could not run: {first_line(exc)}"
            if problem is not None:
                problems.append(f"{where}: {problem}")
        return problems

    # -- actors -----------------------------------------------------------------------------

    async def place(
        self,
        name: str,
        spec: dict[str, Any],
        gpus: tuple[Gpu, ...],
        vcpus: int | None,
        placement_seconds: float,
    ) -> tuple[Any, Placed]:
        """A detached actor named ``name`` running ``spec``'s process: on ``gpus``' node with
        them reserved through Ray's resources, or (no GPUs) wherever ``vcpus`` CPUs are free,
        spread over the nodes. ``WorkerStartError`` when Ray places none in time, ``OSError``
        when the command could not start there."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options: dict[str, Any] = {
            "name": name,
            "namespace": self.namespace,
            "lifetime": "detached",
            "max_concurrency": ACTOR_CONCURRENCY,
            "max_restarts": 0,
            "num_cpus": vcpus or 0,
        }
        if gpus:
            options |= {
                "num_gpus": len(gpus),
                "resources": {f"{GPU_RESOURCE}{gpus[0].name}": len(gpus)},
                "scheduling_strategy": NodeAffinitySchedulingStrategy(gpus[0].node, soft=False),
            }
        else:
            options["scheduling_strategy"] = "SPREAD"
        leftover = self.get(name)
        if leftover is not None:
            # One an earlier leader left that nobody took over (it was never placed, say).
            self.kill(leftover)
        actor = self._actor_class.options(**options).remote(spec)
        try:
            info = await call(actor.describe.remote(), placement_seconds)
        except TimeoutError:
            self.kill(actor)
            wants = (
                f"{len(gpus)} x {gpus[0].name} on node {gpus[0].node[:12]}"
                if gpus
                else f"{vcpus or 0} CPU(s)"
            )
            raise WorkerStartError(
                f"Ray placed no actor for {name} within {placement_seconds:g} s "
                f"(SKIFF_RAY_PLACEMENT_SECONDS); it wants {wants}: see `ray status` for what "
                "the cluster has free"
            ) from None
        except asyncio.CancelledError:
            self.kill(actor)
            raise
        except Exception as exc:
            self.kill(actor)
            raise WorkerStartError(f"the Ray actor of {name} failed: {first_line(exc)}") from exc
        if info["error"]:
            self.kill(actor)
            raise OSError(info["error"])
        return actor, _placed(name, info)

    async def find(self, prefix: str) -> list[tuple[Any, Placed]]:
        """This installation's living actors whose name starts with ``prefix``."""
        names = await asyncio.to_thread(self.ray.util.list_named_actors, all_namespaces=True)
        found = []
        for entry in names:
            name = str(entry.get("name", ""))
            if entry.get("namespace") != self.namespace or not name.startswith(prefix):
                continue
            actor = self.get(name)
            if actor is None:
                continue
            try:
                info = await call(actor.describe.remote(), DESCRIBE_SECONDS)
            except Exception as exc:
                # Dead, or never placed (its leader died while Ray looked for room): ended, so
                # that it neither runs unowned later nor holds its name.
                log.info("Ray actor %s could not be taken over (%s): ended", name, first_line(exc))
                self.kill(actor)
                continue
            found.append((actor, _placed(name, info)))
        return found

    def get(self, name: str) -> Any | None:
        try:
            return self.ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            return None

    def kill(self, actor: Any) -> None:
        """End the actor and free its resources (a detached actor lives until killed)."""
        with contextlib.suppress(Exception):
            self.ray.kill(actor, no_restart=True)


class ClusterUnreachable(RuntimeError):
    """Nothing answers at the cluster's address."""


def _unreachable(address: str, seconds: float = CONNECT_SECONDS) -> str | None:
    """Why a TCP connection to ``address`` (``host:port`` or ``ray://host:port``) fails, trying
    for ``seconds`` (a cluster may be starting too); None when one opens, or when the address
    names no port to try (``auto``)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return None
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=2).close()
        except OSError as exc:
            if time.monotonic() >= deadline:
                return str(exc) or type(exc).__name__
            time.sleep(0.5)
        else:
            return None


def _placed(name: str, info: dict[str, Any]) -> Placed:
    return Placed(name, str(info["node_id"]), str(info["node_ip"]), info["pid"], info)


@define(eq=False, repr=False, slots=False)
class Followed:
    """The processes of one kind (workers, pods) this replica follows: each one's output
    streamed into its log, its end reported (``ended``) unless skiff stopped it."""

    _connection: RayConnection
    _logs: LogSinks
    _ended: Ended
    #: key (worker or pod id) -> (actor, its watcher)
    _followed: dict[str, tuple[Any, asyncio.Task[None]]] = field(init=False, factory=dict)
    #: keys whose end is skiff's doing: not reported.
    _quiet: set[str] = field(init=False, factory=set)

    def __contains__(self, key: str) -> bool:
        return key in self._followed

    def ids(self) -> list[str]:
        return list(self._followed)

    def actor(self, key: str) -> Any | None:
        entry = self._followed.get(key)
        return entry[0] if entry is not None else None

    async def unfollowed(self, prefix: str) -> list[tuple[str, Any, Placed]]:
        """The living actors named ``prefix`` + key that this replica does not follow (an
        earlier leader's, to take over): (key, actor, what it says of itself)."""
        found = []
        for actor, placed in await self._connection.find(prefix):
            key = placed.name.removeprefix(prefix)
            if key not in self._followed:
                found.append((key, actor, placed))
        return found

    def follow(self, key: str, actor: Any, log_key: str) -> None:
        """Stream the output of ``actor`` into the log of (``log_key``, ``key``), from what
        it still keeps, and report its end."""
        sink = self._logs(log_key, key)
        task = asyncio.create_task(self._watch(key, actor, sink))
        self._followed[key] = (actor, task)

    async def _watch(self, key: str, actor: Any, sink: LogSink) -> None:
        code: int | None = None
        offset = 0
        failing_since: float | None = None
        loop = asyncio.get_running_loop()
        try:
            while code is None:
                try:
                    data, offset, code = await call(actor.read.remote(offset, READ_WAIT_SECONDS))
                except Exception as exc:
                    if self._connection.closing:
                        sink.close()
                        return
                    now = loop.time()
                    failing_since = failing_since if failing_since is not None else now
                    if _died(exc) or now - failing_since > READ_FAILURES_SECONDS:
                        raise
                    log.info(
                        "%s: reading its output failed, trying again: %s", key, first_line(exc)
                    )
                    await asyncio.sleep(1.0)
                    continue
                failing_since = None
                if data and (hold := sink.feed(data)):
                    await asyncio.sleep(hold)
        except asyncio.CancelledError:
            sink.close()
            raise
        except Exception as exc:
            code = ACTOR_LOST
            sink.feed(f"skiff: its Ray actor is gone: {first_line(exc)}\n".encode())
            log.warning("%s: its Ray actor is gone: %s", key, first_line(exc))
        sink.close()
        self._followed.pop(key, None)
        self._connection.kill(actor)
        if key in self._quiet or self._connection.closing:
            self._quiet.discard(key)
            return
        try:
            await self._ended(key, code)
        except Exception:
            log.exception("handling the end of %s failed", key)

    async def stop(self, key: str, grace: float, quiet: bool = False) -> None:
        """SIGTERM, ``grace``, SIGKILL; returns once its end has been handled. ``quiet``: the
        end is not reported (skiff ended it for its own reasons)."""
        entry = self._followed.get(key)
        if entry is None:
            return
        actor, task = entry
        if quiet:
            self._quiet.add(key)
        try:
            await call(actor.stop.remote(grace), grace + 10)
        except Exception:
            # Gone already, or not answering: ended all the same.
            self._connection.kill(actor)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await asyncio.shield(task)
        if not task.done():
            # Its end never came through (the actor hangs): the actor goes, and with it the
            # process and the read the watcher waits on.
            self._connection.kill(actor)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await asyncio.shield(task)

    async def forget(self) -> None:
        """Stop following every process (the server stops; the actors go on, for the next
        leader to take over)."""
        tasks = [task for _, task in self._followed.values()]
        self._followed.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def restart(self, key: str, grace: float) -> bool:
        """Stop the process and start it again in its actor (its home kept); False when it
        could not be (its actor is gone)."""
        actor = self.actor(key)
        if actor is None:
            return False
        try:
            error = await call(actor.restart.remote(grace), grace + 30)
        except Exception as exc:
            log.warning("%s could not be restarted: %s", key, first_line(exc))
            return False
        return error is None
