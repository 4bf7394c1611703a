"""Why an endpoint's workers are not running, in words a user can act on: pure, no I/O.

Jobs on an endpoint that cannot place a worker would otherwise wait in silence (``/health``
says only ``throttled: 1``); every place a user looks (``/v1``, ``/health``, the console, the
server log) says the same ``Blocker``.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from skiff.domain.endpoints import ComputeType, EndpointSpec
from skiff.domain.gpus import Gpu, choose


class BlockerCause(enum.StrEnum):
    #: A GPU endpoint whose GPU types (or count) this server does not have at all.
    NO_GPU = "no-gpu"
    #: Its workers fail to start (``lastWorkerFailure``).
    FAILING = "failing-starts"
    #: Wanted workers wait because the server runs as many as ``SKIFF_MAX_WORKERS`` allows.
    WORKER_LIMIT = "worker-limit"
    #: Wanted workers wait for a GPU of its types to be free.
    GPUS_BUSY = "gpus-busy"
    #: The server cannot make a sandbox, and the endpoint is not the administrator's.
    NO_SANDBOX = "no-sandbox"
    #: Its owner's account is disabled: no worker of theirs runs (``domain.scaling``).
    OWNER_DISABLED = "owner-disabled"


#: The reason ``OWNER_DISABLED`` gives, the same to the owner and to a public model's callers.
OWNER_DISABLED_REASON = (
    "its owner's account is disabled: its workers are stopped and none starts until an "
    "administrator enables the account again; its jobs wait in the queue meanwhile"
)


@dataclass(frozen=True, slots=True)
class Blocker:
    cause: BlockerCause
    reason: str


def placement_view(blocker: Blocker) -> dict[str, str]:
    """The ``placement`` key of ``/health`` and of a queued job's ``/status`` and ``/runsync``."""
    return {"cause": blocker.cause.value, "reason": blocker.reason}


def for_caller(blocker: Blocker | None) -> Blocker | None:
    """What a public model's caller is told: why a failing start failed is the owner's (the
    worker's reason, or the last line of its log, may name hosts, paths or credentials), so
    the caller learns only that the model's workers fail to start."""
    if blocker is None or blocker.cause is not BlockerCause.FAILING:
        return blocker
    return Blocker(BlockerCause.FAILING, "the model's workers fail to start")


def describe_gpus(gpus: Sequence[Gpu]) -> str:
    """``"2 x NVIDIA GeForce RTX 4090, 1 x NVIDIA H100 80GB HBM3"``, or ``"no GPUs"``."""
    counts = Counter(g.name for g in sorted(gpus, key=lambda g: g.index))
    return ", ".join(f"{n} x {name}" for name, n in counts.items()) or "no GPUs"


def _wanted(spec: EndpointSpec) -> str:
    types = ", ".join(spec.gpuTypeIds) if spec.gpuTypeIds else "any type"
    per = f"{spec.gpuCount} GPUs of one type" if spec.gpuCount > 1 else "a GPU"
    return f"{per} among [{types}]"


def missing_gpus(spec: EndpointSpec, inventory: Sequence[Gpu]) -> Blocker | None:
    """A GPU endpoint that no GPU of this server could ever serve, even with all of them free."""
    if spec.computeType is not ComputeType.GPU:
        return None
    if choose(spec.gpuTypeIds, spec.gpuCount, inventory) is not None:
        return None
    return Blocker(
        BlockerCause.NO_GPU,
        f"no worker can start: each needs {_wanted(spec)} and this server has "
        f"{describe_gpus(inventory)}; use computeType CPU or GPU types this server has",
    )


def endpoint_warnings(spec: EndpointSpec, inventory: Sequence[Gpu]) -> list[str]:
    """What the create and update answers warn of, in plain sentences (empty when nothing):
    settings that cannot work on this server as it stands. The endpoint is saved all the same
    (the fleet may change), but its jobs would only wait."""
    if missing_gpus(spec, inventory) is None:
        return []
    return [
        f"No worker of this endpoint can start on this server: each needs {_wanted(spec)} "
        f"and this server has {describe_gpus(inventory)}, so its jobs would wait in the "
        "queue until they expire. For work that needs no GPU set `computeType: CPU`; "
        "otherwise name GPU types this server has, or declare the server's GPUs with "
        "SKIFF_GPUS (e.g. SKIFF_GPUS='NVIDIA GeForce RTX 4090:1')."
    ]


def worker_limit_blocker(running: int, limit: int) -> Blocker:
    return Blocker(
        BlockerCause.WORKER_LIMIT,
        f"held back: this server runs {running} workers, its limit of {limit} "
        f"(SKIFF_MAX_WORKERS); more start as others stop",
    )


def gpus_busy_blocker(spec: EndpointSpec) -> Blocker:
    return Blocker(
        BlockerCause.GPUS_BUSY,
        f"waiting for a GPU: each worker needs {_wanted(spec)} and those are all in use",
    )


def why_blocked(
    spec: EndpointSpec,
    inventory: Sequence[Gpu],
    *,
    failure: str | None,
    throttled: int,
    running: int,
    limit: int,
    unsandboxed: str | None = None,
    owner_disabled: bool = False,
) -> Blocker | None:
    """What keeps the endpoint's workers from running, most lasting first; None when nothing
    does. ``throttled``: its workers wanted but waiting for room; ``running``: the worker
    processes of the whole server; ``limit``: the most it runs; ``unsandboxed``: why its
    workers may not start without the sandbox this server cannot make
    (services/isolation.py); ``owner_disabled``: an administrator disabled its owner."""
    if owner_disabled:
        return Blocker(BlockerCause.OWNER_DISABLED, OWNER_DISABLED_REASON)
    missing = missing_gpus(spec, inventory)
    if missing is not None:
        return missing
    if unsandboxed is not None:
        return Blocker(BlockerCause.NO_SANDBOX, unsandboxed)
    if failure is not None:
        return Blocker(BlockerCause.FAILING, f"its workers fail to start: {failure}")
    if throttled:
        if running >= limit:
            return worker_limit_blocker(running, limit)
        if spec.computeType is ComputeType.GPU:
            return gpus_busy_blocker(spec)
    return None
