"""GPUs as the scheduler sees them, and which ones a worker gets: pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Gpu:
    #: The index CUDA_VISIBLE_DEVICES names it by.
    index: int
    #: The product name exactly as NVML reports it, which is also its ``gpuTypeIds`` value.
    name: str
    #: The machine it is on, for a provider that places workers across several (the Ray
    #: node's id); "" for this host. A worker's GPUs are all on one machine.
    node: str = ""


def parse_declared(spec: str) -> list[Gpu]:
    """``"NVIDIA GeForce RTX 4090:2,NVIDIA H100 80GB HBM3:1"`` -> GPUs 0 and 1 (4090), 2 (H100).

    Raises ``ValueError`` with a message that says what is wrong with the declaration.
    """
    gpus: list[Gpu] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, count_text = part.rpartition(":")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"SKIFF_GPUS entry {part!r} is not 'GPU type:count'")
        try:
            count = int(count_text)
        except ValueError:
            raise ValueError(f"SKIFF_GPUS entry {part!r}: the count is not a number") from None
        if count < 1:
            raise ValueError(f"SKIFF_GPUS entry {part!r}: the count must be at least 1")
        first = len(gpus)
        gpus.extend(Gpu(index=first + i, name=name) for i in range(count))
    return gpus


def choose(wanted_types: list[str], count: int, free: Iterable[Gpu]) -> list[Gpu] | None:
    """``count`` free GPUs of the first type in ``wanted_types`` that has that many on one
    machine, else of the next type; any type when the list is empty (in inventory order). None
    when none has room. A worker's GPUs are always of one type, on one machine (the first, in
    inventory order, with room)."""
    by_type: dict[str, dict[str, list[Gpu]]] = {}
    for gpu in sorted(free, key=lambda g: g.index):
        by_type.setdefault(gpu.name, {}).setdefault(gpu.node, []).append(gpu)
    order = wanted_types or list(by_type)
    for name in order:
        for candidates in by_type.get(name, {}).values():
            if len(candidates) >= count:
                return candidates[:count]
    return None
