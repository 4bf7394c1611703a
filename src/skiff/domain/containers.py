"""What a container worker is given, worked out from an endpoint's settings: its CPU and memory
limits (CPU endpoints), and how many GPUs it sees inside (GPU endpoints).

Pure mapping; the container provider (``providers/docker.py``) turns it into Docker's
``nano_cpus`` / ``mem_limit``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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

_INSTANCE_ID = re.compile(r"^(cpu[35][cg])-([1-9][0-9]*)-([1-9][0-9]*)$")


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
    match = _INSTANCE_ID.match(instance_id)
    if match is None:
        return None
    return CpuLimits(vcpus=int(match[2]), memory_bytes=int(match[3]) * GIB)


def cpu_limits(spec: EndpointSpec) -> CpuLimits | None:
    """The limits of a CPU endpoint's worker: ``vcpuCount`` vCPUs with the memory its first
    flavor gives each; None for a GPU endpoint (it gets its GPUs, not a CPU quota)."""
    if spec.computeType is not ComputeType.CPU:
        return None
    flavor = spec.cpuFlavorIds[0] if spec.cpuFlavorIds else DEFAULT_FLAVOR
    return CpuLimits(
        vcpus=spec.vcpuCount, memory_bytes=spec.vcpuCount * MEMORY_GB_PER_VCPU[flavor] * GIB
    )


def visible_devices_inside(count: int) -> str:
    """``CUDA_VISIBLE_DEVICES`` inside a container given ``count`` GPUs: the device request
    shows it only those, numbered from 0, whatever their indices on the host."""
    return ",".join(str(i) for i in range(count))
