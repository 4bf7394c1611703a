"""CPU instance ids as the hosted platform names them: ``cpu3c-2-4`` is flavor ``cpu3c`` with
2 vCPUs and 4 GB of memory. Pure parsing, shared by endpoint settings (``domain/endpoints``)
and container limits (``domain/containers``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: flavor-vCPUs-GB, no leading zeros. The digit counts only keep absurd lengths out of the
#: pattern; the ranges below are the bounds, so that a refusal can say which one was passed.
PATTERN = r"^(cpu[35][cg])-([1-9][0-9]{0,2})-([1-9][0-9]{0,3})$"
_INSTANCE_ID = re.compile(PATTERN)
#: The same ceiling as ``vcpuCount`` (``domain/endpoints``), which the first id sets.
MAX_VCPUS = 512
MAX_MEMORY_GB = 4096


@dataclass(frozen=True, slots=True)
class InstanceId:
    flavor: str
    vcpus: int
    memory_gb: int

    def __str__(self) -> str:
        return f"{self.flavor}-{self.vcpus}-{self.memory_gb}"


def parse(text: str) -> InstanceId | None:
    """The instance id ``text`` names; None when it is not one, its bounds included."""
    parsed = shape(text)
    return parsed if parsed is not None and out_of_bounds(parsed) is None else None


def out_of_bounds(parsed: InstanceId) -> str | None:
    """What of ``parsed`` is past skiff's bounds, as a sentence; None when nothing is."""
    if parsed.vcpus > MAX_VCPUS:
        return f"{parsed} has {parsed.vcpus} vCPUs; at most {MAX_VCPUS}"
    if parsed.memory_gb > MAX_MEMORY_GB:
        return f"{parsed} has {parsed.memory_gb} GB of memory; at most {MAX_MEMORY_GB}"
    return None


def shape(text: str) -> InstanceId | None:
    """``text`` read as flavor-vCPUs-GB whatever its numbers; None when it is not that shape."""
    match = _INSTANCE_ID.match(text)
    if match is None:
        return None
    return InstanceId(flavor=match[1], vcpus=int(match[2]), memory_gb=int(match[3]))
