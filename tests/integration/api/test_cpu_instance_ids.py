"""A CPU endpoint's ``instanceIds`` through the in-process app (``conftest.py``) on a real
SQLite file: taken on create and update, shown on every CPU endpoint (as what its vCPUs and
flavor amount to when none were given), refused for GPU endpoints and when malformed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from in_process import InProcess


async def create(app: InProcess, **fields: Any) -> httpx.Response:
    body = {"templateId": await app.create_template(), "computeType": "CPU", **fields}
    return await app.http.post("/v1/endpoints", json=body)


async def test_an_instance_id_sizes_the_endpoint_and_reads_back(in_process: InProcess) -> None:
    made = await create(in_process, instanceIds=["cpu3c-8-16", "cpu3g-8-32"])
    assert made.status_code == 200, made.text
    endpoint = made.json()
    assert endpoint["instanceIds"] == ["cpu3c-8-16", "cpu3g-8-32"]
    # The first one decides: the settings never claim the default 2 vCPUs.
    assert endpoint["vcpuCount"] == 8 and endpoint["cpuFlavorIds"] == ["cpu3c"]
    again = await in_process.http.get(f"/v1/endpoints/{endpoint['id']}")
    assert again.json()["instanceIds"] == ["cpu3c-8-16", "cpu3g-8-32"]


async def test_a_cpu_endpoint_without_instance_ids_shows_the_one_it_amounts_to(
    in_process: InProcess,
) -> None:
    made = await create(in_process, vcpuCount=4, cpuFlavorIds=["cpu5g"])
    assert made.json()["instanceIds"] == ["cpu5g-4-16"]
    default = await create(in_process)
    assert default.json()["instanceIds"] == ["cpu3c-2-4"]


async def test_a_gpu_endpoint_shows_none_and_is_refused_any(in_process: InProcess) -> None:
    gpu = await in_process.http.post(
        "/v1/endpoints", json={"templateId": await in_process.create_template()}
    )
    assert gpu.json()["instanceIds"] == []
    refused = await create(in_process, computeType="GPU", instanceIds=["cpu3c-2-4"])
    assert refused.status_code == 400 and refused.json()["field"] == "instanceIds", refused.text
    patched = await in_process.http.patch(
        f"/v1/endpoints/{gpu.json()['id']}", json={"instanceIds": ["cpu3c-2-4"]}
    )
    assert patched.status_code == 400 and patched.json()["field"] == "instanceIds"


@pytest.mark.parametrize(
    "bad",
    [
        ["cpu3c-0-4"],
        ["cpu9c-2-4"],
        ["cpu3c-2"],
        ["CPU3C-2-4"],
        ["cpu3c-2-4", "cpu3c-2-4"],
        [""],
        ["cpu3c-513-8"],
        ["cpu3c-8-4097"],
        [f"cpu3c-{n}-{2 * n}" for n in range(1, 10)],
    ],
)
async def test_a_malformed_or_repeated_instance_id_is_refused_naming_the_field(
    in_process: InProcess, bad: list[str]
) -> None:
    refused = await create(in_process, instanceIds=bad)
    assert refused.status_code == 400, refused.text
    assert refused.json()["field"].startswith("instanceIds"), refused.json()


async def test_changing_instance_ids_rolls_the_workers_and_resizing_by_vcpus_drops_them(
    in_process: InProcess,
) -> None:
    endpoint = (await create(in_process, instanceIds=["cpu3c-2-4"])).json()
    url = f"/v1/endpoints/{endpoint['id']}"
    same = (await in_process.http.patch(url, json={"vcpuCount": 2})).json()
    # A form sending the settings back unchanged keeps them, and rolls nothing.
    assert same["instanceIds"] == ["cpu3c-2-4"] and same["version"] == endpoint["version"]
    grown = (await in_process.http.patch(url, json={"instanceIds": ["cpu5c-4-8"]})).json()
    assert grown["version"] == endpoint["version"] + 1 and grown["vcpuCount"] == 4
    resized = (await in_process.http.patch(url, json={"vcpuCount": 6})).json()
    assert resized["instanceIds"] == ["cpu5c-6-12"] and resized["vcpuCount"] == 6


async def test_an_instance_id_past_a_bound_is_refused_saying_which(in_process: InProcess) -> None:
    refused = await create(in_process, instanceIds=["cpu3c-513-64"])
    assert refused.status_code == 400
    assert "513 vCPUs; at most 512" in refused.json()["message"], refused.json()
