"""Why an endpoint's workers are held back, as the user reads it."""

from __future__ import annotations

from skiff.domain.endpoints import ComputeType, EndpointSpec
from skiff.domain.gpus import Gpu
from skiff.domain.placement import (
    BlockerCause,
    describe_gpus,
    endpoint_warnings,
    missing_gpus,
    why_blocked,
)

RTX = "NVIDIA GeForce RTX 4090"
H100 = "NVIDIA H100 80GB HBM3"


def spec(**fields: object) -> EndpointSpec:
    return EndpointSpec.model_validate({"name": "e", "templateId": "t", **fields})


def held(endpoint: EndpointSpec, inventory: list[Gpu], **state: object) -> BlockerCause | None:
    values: dict[str, object] = {"failure": None, "throttled": 0, "running": 0, "limit": 8}
    values.update(state)
    blocker = why_blocked(endpoint, inventory, **values)  # type: ignore[arg-type]
    return blocker.cause if blocker is not None else None


def test_a_gpu_endpoint_on_a_server_without_gpus_names_what_it_needs_and_what_there_is() -> None:
    blocker = missing_gpus(spec(gpuTypeIds=[H100, RTX]), [])
    assert blocker is not None and blocker.cause is BlockerCause.NO_GPU
    assert blocker.reason == (
        f"no worker can start: each needs a GPU among [{H100}, {RTX}] and this server has "
        "no GPUs; use computeType CPU or GPU types this server has"
    )


def test_the_default_compute_type_is_gpu_so_a_plain_endpoint_on_a_cpu_host_is_held() -> None:
    blocker = missing_gpus(spec(), [])
    assert blocker is not None and "a GPU among [any type]" in blocker.reason


def test_more_gpus_per_worker_than_one_type_has_can_never_be_placed() -> None:
    inventory = [Gpu(0, RTX), Gpu(1, RTX), Gpu(2, H100)]
    blocker = missing_gpus(spec(gpuCount=3), inventory)
    assert blocker is not None
    assert "3 GPUs of one type among [any type]" in blocker.reason
    assert f"2 x {RTX}, 1 x {H100}" in blocker.reason
    assert missing_gpus(spec(gpuCount=2), inventory) is None


def test_a_cpu_endpoint_never_misses_a_gpu() -> None:
    assert missing_gpus(spec(computeType=ComputeType.CPU), []) is None


def test_the_most_lasting_cause_is_named_first() -> None:
    cpu = spec(computeType=ComputeType.CPU)
    gpu = spec(gpuTypeIds=[RTX])
    inventory = [Gpu(0, RTX)]
    assert held(spec(gpuTypeIds=[H100]), inventory, failure="boom", throttled=1) is (
        BlockerCause.NO_GPU
    )
    assert held(cpu, [], failure="boom", throttled=1, running=8) is BlockerCause.FAILING
    assert held(cpu, [], throttled=1, running=8) is BlockerCause.WORKER_LIMIT
    assert held(gpu, inventory, throttled=1, running=8) is BlockerCause.WORKER_LIMIT
    assert held(gpu, inventory, throttled=1, running=1) is BlockerCause.GPUS_BUSY
    assert held(cpu, [], throttled=1, running=7) is None
    assert held(gpu, inventory) is None


def test_a_disabled_owner_is_named_before_any_other_cause() -> None:
    missing = spec(gpuTypeIds=[H100])
    assert held(missing, [], failure="boom", throttled=1, owner_disabled=True) is (
        BlockerCause.OWNER_DISABLED
    )
    assert held(spec(computeType=ComputeType.CPU), [], owner_disabled=True) is (
        BlockerCause.OWNER_DISABLED
    )


def test_describe_gpus_counts_each_type_in_inventory_order() -> None:
    assert describe_gpus([Gpu(1, RTX), Gpu(0, H100), Gpu(2, RTX)]) == f"1 x {H100}, 2 x {RTX}"
    assert describe_gpus([]) == "no GPUs"


def test_an_endpoint_without_compute_type_on_a_cpu_host_is_warned_of_cpu_and_skiff_gpus() -> None:
    (warning,) = endpoint_warnings(spec(), [])
    assert "needs a GPU among [any type] and this server has no GPUs" in warning
    assert "`computeType: CPU`" in warning and "SKIFF_GPUS" in warning


def test_gpu_types_the_fleet_lacks_are_warned_of_and_types_it_has_are_not() -> None:
    (warning,) = endpoint_warnings(spec(gpuTypeIds=[H100]), [Gpu(0, RTX)])
    assert f"among [{H100}] and this server has 1 x {RTX}" in warning
    assert endpoint_warnings(spec(gpuTypeIds=[H100, RTX]), [Gpu(0, RTX)]) == []


def test_a_cpu_endpoint_is_warned_of_nothing() -> None:
    assert endpoint_warnings(spec(computeType=ComputeType.CPU), []) == []
