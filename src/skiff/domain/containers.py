"""What a container worker is given, worked out from an endpoint's settings: its CPU and memory
limits (CPU endpoints), and how many GPUs it sees inside (GPU endpoints).

Pure mapping; the container provider (``providers/docker.py``) turns it into Docker's
``nano_cpus`` / ``mem_limit``.
"""

from __future__ import annotations

from dataclasses import dataclass

from skiff.domain import instance_ids
from skiff.domain.endpoints import ComputeType, CpuFlavor, EndpointSpec

GIB = 1024**3

#: Memory per vCPU of each CPU flavor, in GB, as the hosted platform sells them: compute
#: optimised (``c``, ``cpu3c-2-4``) has 2, general purpose (``g``, ``cpu3g-2-8``) 4.
MEMORY_GB_PER_VCPU = {
    CpuFlavor.cpu3c: 2,
    CpuFlavor.cpu5c: 2,
    CpuFlavor.cpu3g: 4,
    CpuFlavor.cpu5g: 4,
}
#: The flavor assumed when an endpoint names none (the hosted platform's first choice).
DEFAULT_FLAVOR = CpuFlavor.cpu3c
#: The most tasks (processes and threads: the kernel counts each thread) one worker or pod
#: container may hold (``SKIFF_CONTAINER_PIDS_LIMIT``): room for a model server's thread pools
#: and data-loader processes, while a fork bomb stops at its container rather than filling the
#: host's process table.
DEFAULT_PIDS_LIMIT = 4096
#: Below this a container's runtime and the SDK's own threads may not even start; a typo such as
#: 4 would give workers that fail without saying why.
MIN_PIDS_LIMIT = 64
#: The kernel's own ceiling on process ids (``PID_MAX_LIMIT`` on 64-bit Linux).
MAX_PIDS_LIMIT = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CpuLimits:
    vcpus: int
    memory_bytes: int

    @property
    def nano_cpus(self) -> int:
        """Docker's unit: billionths of a CPU."""
        return self.vcpus * 1_000_000_000


def parse_instance_id(instance_id: str) -> CpuLimits | None:
    """``cpu3c-2-4`` (flavor-vCPUs-GB of RAM) as limits; None when it is not one."""
    parsed = instance_ids.parse(instance_id)
    if parsed is None:
        return None
    return CpuLimits(vcpus=parsed.vcpus, memory_bytes=parsed.memory_gb * GIB)


def cpu_limits(spec: EndpointSpec) -> CpuLimits | None:
    """The limits of a CPU endpoint's worker: its first instance id's vCPUs and memory, else
    ``vcpuCount`` vCPUs with the memory its first flavor gives each; None for a GPU endpoint
    (it gets its GPUs, not a CPU quota)."""
    if spec.computeType is not ComputeType.CPU:
        return None
    for given in spec.instanceIds[:1]:
        limits = parse_instance_id(given)
        if limits is not None:
            return limits
    flavor = spec.cpuFlavorIds[0] if spec.cpuFlavorIds else DEFAULT_FLAVOR
    return CpuLimits(
        vcpus=spec.vcpuCount, memory_bytes=spec.vcpuCount * MEMORY_GB_PER_VCPU[flavor] * GIB
    )


def shown_instance_ids(spec: EndpointSpec) -> list[str]:
    """An endpoint's ``instanceIds`` as the API shows them: those given, else the one a CPU
    endpoint's ``vcpuCount`` and flavor amount to (``cpu3c-2-4``); none for a GPU endpoint."""
    if spec.computeType is not ComputeType.CPU:
        return []
    if spec.instanceIds:
        return list(spec.instanceIds)
    flavor = spec.cpuFlavorIds[0] if spec.cpuFlavorIds else DEFAULT_FLAVOR
    memory_gb = spec.vcpuCount * MEMORY_GB_PER_VCPU[flavor]
    return [str(instance_ids.InstanceId(flavor.value, spec.vcpuCount, memory_gb))]


def visible_devices_inside(count: int) -> str:
    """``CUDA_VISIBLE_DEVICES`` inside a container given ``count`` GPUs: the device request
    shows it only those, numbered from 0, whatever their indices on the host."""
    return ",".join(str(i) for i in range(count))
