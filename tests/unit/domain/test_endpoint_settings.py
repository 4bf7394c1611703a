"""Endpoint settings: defaults filled in on create, limits, updates and what rolls workers."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from skiff.domain.endpoints import (
    ComputeType,
    CpuFlavor,
    EndpointCreate,
    EndpointSpec,
    EndpointUpdate,
    ScalerType,
    apply_endpoint_update,
    rolls_workers,
    spec_from_create,
)


def _spec(**changes: Any) -> EndpointSpec:
    return spec_from_create(EndpointCreate(templateId="tpl-1", **changes), "default-name")


def _error_locations(exc: ValidationError) -> set[str]:
    return {".".join(str(part) for part in err["loc"]) for err in exc.errors()}


def test_create_with_only_template_fills_every_default() -> None:
    spec = _spec()
    assert spec.name == "default-name"
    assert spec.templateId == "tpl-1"
    assert spec.computeType is ComputeType.GPU
    assert spec.gpuCount == 1
    assert spec.idleTimeout == 5
    assert spec.scalerType is ScalerType.QUEUE_DELAY
    assert spec.scalerValue == 4
    assert spec.workersMin == 0
    assert spec.workersMax == 3
    assert spec.executionTimeoutMs == 600_000
    assert spec.flashboot is False
    assert spec.vcpuCount == 2
    assert spec.gpuTypeIds == []
    assert spec.cpuFlavorIds == []
    assert spec.env == {}
    assert spec.networkVolumeId is None


def test_create_keeps_given_values_over_defaults() -> None:
    spec = _spec(
        name="mine",
        computeType="CPU",
        cpuFlavorIds=["cpu3c", "cpu5g"],
        workersMin=1,
        workersMax=5,
        idleTimeout=60,
        scalerType="REQUEST_COUNT",
        scalerValue=2,
        env={"A": "1"},
    )
    assert spec.name == "mine"
    assert spec.computeType is ComputeType.CPU
    assert spec.cpuFlavorIds == [CpuFlavor.cpu3c, CpuFlavor.cpu5g]
    assert (spec.workersMin, spec.workersMax) == (1, 5)
    assert spec.idleTimeout == 60
    assert spec.scalerType is ScalerType.REQUEST_COUNT
    assert spec.scalerValue == 2
    assert spec.env == {"A": "1"}


def test_create_requires_a_template_id() -> None:
    with pytest.raises(ValidationError) as info:
        EndpointCreate.model_validate({"name": "x"})
    assert "templateId" in _error_locations(info.value)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"idleTimeout": 0}, "idleTimeout"),
        ({"idleTimeout": 3601}, "idleTimeout"),
        ({"scalerValue": 0}, "scalerValue"),
        ({"gpuCount": 0}, "gpuCount"),
        ({"gpuCount": 17}, "gpuCount"),
        ({"vcpuCount": 0}, "vcpuCount"),
        ({"workersMax": -1}, "workersMax"),
        ({"workersMin": 1001}, "workersMin"),
        ({"executionTimeoutMs": 4999}, "executionTimeoutMs"),
        ({"name": "n" * 192}, "name"),
        ({"name": ""}, "name"),
        ({"gpuTypeIds": ["NVIDIA A100", "NVIDIA A100"]}, "gpuTypeIds"),
        ({"gpuTypeIds": ["NVIDIA A100", " "]}, "gpuTypeIds"),
        ({"cpuFlavorIds": ["cpu9x"]}, "cpuFlavorIds.0"),
        ({"computeType": "TPU"}, "computeType"),
        ({"scalerType": "CPU_LOAD"}, "scalerType"),
        ({"templateId": ""}, "templateId"),
        ({"gpuIds": "AMPERE_16"}, "gpuIds"),
    ],
    ids=[
        "idle-timeout-0",
        "idle-timeout-3601",
        "scaler-value-0",
        "gpu-count-0",
        "gpu-count-17",
        "vcpu-count-0",
        "workers-max-negative",
        "workers-min-1001",
        "execution-timeout-below-min",
        "name-192-chars",
        "name-empty",
        "gpu-types-duplicated",
        "gpu-types-blank",
        "cpu-flavor-unknown",
        "compute-type-unknown",
        "scaler-type-unknown",
        "template-id-empty",
        "unknown-field",
    ],
)
def test_invalid_create_is_rejected_naming_the_field(changes: dict[str, Any], field: str) -> None:
    body = {"templateId": "tpl-1", **changes}
    with pytest.raises(ValidationError) as info:
        EndpointCreate.model_validate(body)
    assert field in _error_locations(info.value)


def test_name_of_191_characters_is_accepted() -> None:
    assert _spec(name="n" * 191).name == "n" * 191


def test_workers_min_above_max_is_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        EndpointCreate.model_validate({"templateId": "t", "workersMin": 4, "workersMax": 2})
    assert "workersMin must not be greater than workersMax" in str(info.value)


def test_workers_min_above_default_max_is_rejected_when_the_spec_is_built() -> None:
    create = EndpointCreate.model_validate({"templateId": "t", "workersMin": 4})
    with pytest.raises(ValidationError) as info:
        spec_from_create(create, "x")
    assert "workersMin must not be greater than workersMax" in str(info.value)


# -- updates -----------------------------------------------------------------------------


def test_update_merges_only_the_fields_it_sets() -> None:
    current = _spec(name="keep", workersMax=5, env={"A": "1"})
    updated = apply_endpoint_update(current, EndpointUpdate(idleTimeout=30))
    assert updated.idleTimeout == 30
    assert updated.name == "keep"
    assert updated.workersMax == 5
    assert updated.env == {"A": "1"}
    assert current.idleTimeout == 5


def test_update_with_null_leaves_the_field_unchanged() -> None:
    current = _spec(workersMax=5)
    updated = apply_endpoint_update(current, EndpointUpdate.model_validate({"workersMax": None}))
    assert updated.workersMax == 5


def test_update_with_null_clears_the_network_volume() -> None:
    current = _spec(networkVolumeId="vol1")
    updated = apply_endpoint_update(
        current, EndpointUpdate.model_validate({"networkVolumeId": None})
    )
    assert updated.networkVolumeId is None


def test_update_is_validated_against_the_merged_settings() -> None:
    current = _spec(workersMin=0, workersMax=2)
    with pytest.raises(ValidationError) as info:
        apply_endpoint_update(current, EndpointUpdate(workersMin=3))
    assert "workersMin must not be greater than workersMax" in str(info.value)


def test_update_raising_min_and_max_together_is_accepted() -> None:
    current = _spec(workersMin=0, workersMax=2)
    updated = apply_endpoint_update(current, EndpointUpdate(workersMin=3, workersMax=4))
    assert (updated.workersMin, updated.workersMax) == (3, 4)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"computeType": "CPU"}, "computeType"),
        ({"idleTimeout": 0}, "idleTimeout"),
        ({"gpuTypeIds": ["A", "A"]}, "gpuTypeIds"),
    ],
    ids=["compute-type-fixed", "idle-timeout-0", "duplicated-gpu-types"],
)
def test_invalid_update_is_rejected_naming_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        EndpointUpdate.model_validate(body)
    assert field in _error_locations(info.value)


@pytest.mark.parametrize(
    ("update", "rolls"),
    [
        ({"templateId": "tpl-2"}, True),
        ({"env": {"A": "2"}}, True),
        ({"gpuTypeIds": ["NVIDIA H100"]}, True),
        ({"gpuCount": 2}, True),
        ({"vcpuCount": 4}, True),
        ({"cpuFlavorIds": ["cpu5c"]}, True),
        ({"networkVolumeId": "vol-1"}, True),
        ({"instanceIds": ["cpu3c-4-8"]}, True),
        ({"workersMax": 10}, False),
        ({"idleTimeout": 120}, False),
        ({"name": "renamed"}, False),
        ({"scalerValue": 1}, False),
        ({"executionTimeoutMs": 60_000}, False),
        ({"env": {"A": "1"}}, False),
    ],
    ids=[
        "template",
        "env",
        "gpu-types",
        "gpu-count",
        "vcpu-count",
        "cpu-flavors",
        "network-volume",
        "instance-ids",
        "workers-max",
        "idle-timeout",
        "name",
        "scaler-value",
        "execution-timeout",
        "env-unchanged",
    ],
)
def test_rolls_workers_only_for_fields_the_workers_see(update: dict[str, Any], rolls: bool) -> None:
    before = _spec(env={"A": "1"}, gpuTypeIds=["NVIDIA A100"])
    after = apply_endpoint_update(before, EndpointUpdate.model_validate(update))
    assert rolls_workers(before, after) is rolls


def test_the_first_instance_id_sets_vcpu_count_and_flavor_on_create() -> None:
    spec = _spec(computeType="CPU", instanceIds=["cpu5g-8-32", "cpu3c-2-4"])
    assert spec.instanceIds == ["cpu5g-8-32", "cpu3c-2-4"]
    assert (spec.vcpuCount, spec.cpuFlavorIds) == (8, [CpuFlavor.cpu5g])


def test_a_create_without_instance_ids_keeps_none() -> None:
    # None given stays none stored: what the API shows then is derived (domain/containers).
    assert _spec(computeType="CPU").instanceIds == []


@pytest.mark.parametrize(
    "given",
    [
        ["cpu3c-0-4"],
        ["cpu3c-2-0"],
        ["cpu7c-2-4"],
        ["cpu3x-2-4"],
        ["cpu3c-02-4"],
        ["cpu3c-2"],
        ["CPU3C-2-4"],
        [" cpu3c-2-4"],
        [""],
        ["cpu3c-513-1024"],
        ["cpu3c-2-4097"],
        ["cpu3c-2-4", "cpu3c-2-4"],
        [f"cpu3c-{n}-{2 * n}" for n in range(1, 10)],
    ],
    ids=[
        "no-vcpus",
        "no-memory",
        "unknown-generation",
        "unknown-class",
        "leading-zero",
        "no-memory-part",
        "upper-case",
        "padded",
        "empty",
        "vcpus-past-512",
        "memory-past-4096",
        "repeated",
        "more-than-8",
    ],
)
def test_a_bad_instance_id_list_is_rejected_naming_the_field(given: list[str]) -> None:
    for model in (EndpointCreate, EndpointUpdate):
        with pytest.raises(ValidationError) as info:
            model.model_validate({"templateId": "tpl-1", "instanceIds": given})
        assert any(where.startswith("instanceIds") for where in _error_locations(info.value))


def test_an_instance_id_past_a_bound_is_refused_saying_which() -> None:
    with pytest.raises(ValidationError, match="513 vCPUs; at most 512"):
        EndpointCreate.model_validate({"templateId": "tpl-1", "instanceIds": ["cpu3c-513-8"]})
    with pytest.raises(ValidationError, match="5000 GB of memory; at most 4096"):
        EndpointCreate.model_validate({"templateId": "tpl-1", "instanceIds": ["cpu3c-8-5000"]})


def test_the_bounds_themselves_are_accepted() -> None:
    spec = _spec(computeType="CPU", instanceIds=["cpu3c-512-4096", "cpu5c-1-1"])
    assert spec.vcpuCount == 512


def test_updating_instance_ids_resizes_the_endpoint() -> None:
    before = _spec(computeType="CPU", vcpuCount=2)
    after = apply_endpoint_update(before, EndpointUpdate(instanceIds=["cpu3g-4-16"]))
    assert (after.instanceIds, after.vcpuCount, after.cpuFlavorIds) == (
        ["cpu3g-4-16"],
        4,
        [CpuFlavor.cpu3g],
    )


def test_resizing_by_vcpu_count_drops_the_instance_ids_given_before() -> None:
    # Kept, the old first id would size the workers over again and undo the change.
    before = _spec(computeType="CPU", instanceIds=["cpu3c-8-16"])
    after = apply_endpoint_update(before, EndpointUpdate(vcpuCount=4))
    assert (after.instanceIds, after.vcpuCount) == ([], 4)


def test_sending_back_the_same_vcpu_count_keeps_the_instance_ids() -> None:
    before = _spec(computeType="CPU", instanceIds=["cpu3c-8-16"])
    after = apply_endpoint_update(before, EndpointUpdate(vcpuCount=8, cpuFlavorIds=["cpu3c"]))
    assert after.instanceIds == ["cpu3c-8-16"] and not rolls_workers(before, after)
