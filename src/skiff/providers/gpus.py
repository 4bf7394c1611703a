"""Reading this host's GPU inventory: NVML when the host has NVIDIA GPUs, or a declared fleet
(``SKIFF_GPUS``) on hosts without them or to simulate one."""

from __future__ import annotations

import logging

from skiff.domain.gpus import Gpu, parse_declared

log = logging.getLogger(__name__)


def read_nvml() -> list[Gpu]:
    """Every GPU NVML sees, by index and product name; empty when there is no driver."""
    try:
        import pynvml  # type: ignore[import-untyped]
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            if isinstance(name, bytes):  # older bindings answer bytes
                name = name.decode()
            gpus.append(Gpu(index=index, name=str(name)))
        return gpus
    finally:
        pynvml.nvmlShutdown()


def inventory(declared: str | None) -> list[Gpu]:
    """The declared fleet when there is one (it wins, so a GPU host can simulate another),
    else what NVML reports."""
    if declared:
        return parse_declared(declared)
    gpus = read_nvml()
    if gpus:
        log.info("GPUs from NVML: %s", ", ".join(f"{g.index}: {g.name}" for g in gpus))
    return gpus
