"""Reading the GPU inventory. NVML needs an NVIDIA driver, which this suite's machines do not
have, so the NVML path is driven through a stand-in of the ``pynvml`` functions it calls (the
only mock in the suite); the declared-fleet path is real."""

from __future__ import annotations

from typing import Any

import pynvml  # type: ignore[import-untyped]
import pytest

from skiff.domain.gpus import Gpu
from skiff.providers import gpus


class FakeNvml:
    def __init__(self, names: list[Any]) -> None:
        self.names = names
        self.shut_down = False

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
        monkeypatch.setattr(pynvml, "nvmlShutdown", self.shutdown)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: len(self.names))
        monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetName", lambda h: self.names[h])

    def shutdown(self) -> None:
        self.shut_down = True


def test_nvml_names_are_the_gpu_type_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(["NVIDIA H100 80GB HBM3", b"NVIDIA GeForce RTX 4090"])
    fake.install(monkeypatch)
    assert gpus.read_nvml() == [
        Gpu(0, "NVIDIA H100 80GB HBM3"),
        Gpu(1, "NVIDIA GeForce RTX 4090"),
    ]
    assert fake.shut_down


def test_a_host_without_a_driver_has_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    assert gpus.read_nvml() == []
    assert gpus.inventory(None) == []


def test_a_declared_fleet_wins_over_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml(["NVIDIA H100 80GB HBM3"]).install(monkeypatch)
    assert gpus.inventory("NVIDIA L4:2") == [Gpu(0, "NVIDIA L4"), Gpu(1, "NVIDIA L4")]
