"""The ``warnings`` of the answers to creating and updating an endpoint, through the in-process
app on a real SQLite file: a GPU endpoint no GPU of the server can serve is saved, and the answer
says why its jobs would only wait and what to do; a CPU endpoint is warned of nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from in_process import InProcess, running
from skiff.providers import gpus


@pytest.fixture
async def no_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[InProcess]:
    """A server on a host without GPUs (NVML sees none, none declared), whatever this host has."""
    monkeypatch.setattr(gpus, "read_nvml", list)
    async with running(tmp_path / "data") as app:
        yield app


async def test_an_endpoint_needing_a_gpu_on_a_server_without_gpus_is_saved_with_a_warning(
    no_gpus: InProcess,
) -> None:
    template = await no_gpus.create_template()
    made = await no_gpus.http.post("/v1/endpoints", json={"templateId": template})
    assert made.status_code == 200, made.text
    (warning,) = made.json()["warnings"]
    assert "needs a GPU among [any type] and this server has no GPUs" in warning
    assert "`computeType: CPU`" in warning and "SKIFF_GPUS" in warning
    # Saved all the same; a plain read carries no warnings (its `placement` says why it waits).
    read = await no_gpus.http.get(f"/v1/endpoints/{made.json()['id']}")
    assert "warnings" not in read.json() and read.json()["placement"]["cause"] == "no-gpu"


async def test_an_update_of_an_endpoint_no_gpu_here_can_serve_is_warned_of_it_again(
    no_gpus: InProcess,
) -> None:
    template = await no_gpus.create_template()
    gpu = await no_gpus.http.post(
        "/v1/endpoints",
        json={"templateId": template, "gpuTypeIds": ["NVIDIA H100 80GB HBM3"]},
    )
    (created,) = gpu.json()["warnings"]
    assert "among [NVIDIA H100 80GB HBM3] and this server has no GPUs" in created
    patched = await no_gpus.http.patch(f"/v1/endpoints/{gpu.json()['id']}", json={"workersMax": 2})
    assert patched.status_code == 200 and patched.json()["warnings"] == [created]
    posted = await no_gpus.http.post(
        f"/v1/endpoints/{gpu.json()['id']}/update", json={"gpuCount": 2}
    )
    (again,) = posted.json()["warnings"]
    assert "each needs 2 GPUs of one type among [NVIDIA H100 80GB HBM3]" in again


async def test_a_cpu_endpoint_gets_no_warnings(no_gpus: InProcess) -> None:
    made = await no_gpus.create_endpoint()
    assert made["warnings"] == []
    patched = await no_gpus.http.patch(f"/v1/endpoints/{made['id']}", json={"workersMax": 2})
    assert patched.json()["warnings"] == []


async def test_gpu_types_the_declared_fleet_lacks_are_warned_of(tmp_path: Path) -> None:
    async with running(tmp_path / "data", gpus="NVIDIA GeForce RTX 4090:1") as app:
        template = await app.create_template()
        lacking = await app.http.post(
            "/v1/endpoints", json={"templateId": template, "gpuTypeIds": ["NVIDIA H100 PCIe"]}
        )
        (warning,) = lacking.json()["warnings"]
        assert "this server has 1 x NVIDIA GeForce RTX 4090" in warning
        served = await app.http.post(
            "/v1/endpoints",
            json={"templateId": template, "gpuTypeIds": ["NVIDIA GeForce RTX 4090"]},
        )
        assert served.json()["warnings"] == []


async def test_the_sdks_save_endpoint_answers_its_fields_and_the_warnings_beside_them(
    no_gpus: InProcess,
) -> None:
    """runpod.create_endpoint's own mutation: ``data.saveEndpoint`` holds exactly the fields it
    asks for (what it parses), the warnings come in ``extensions`` (which it ignores), and a
    client may also ask the endpoint for its ``warnings``."""
    from runpod.api.mutations.endpoints import generate_endpoint_mutation

    template = await no_gpus.create_template()
    query = generate_endpoint_mutation("sdk-made", template)  # gpuIds AMPERE_16: any type
    answer = (await no_gpus.http.post("/graphql", json={"query": query})).json()
    assert "errors" not in answer, answer
    assert "warnings" not in answer["data"]["saveEndpoint"]
    (warning,) = answer["extensions"]["warnings"]
    assert "this server has no GPUs" in warning and "SKIFF_GPUS" in warning

    # The same mutation asking for the warnings too (after the last field it selects).
    head, tail = generate_endpoint_mutation("sdk-cpu", template, gpu_ids="CPU").rsplit(
        "workersMax", 1
    )
    cpu = f"{head}workersMax warnings{tail}"
    answer = (await no_gpus.http.post("/graphql", json={"query": cpu})).json()
    assert "extensions" not in answer and answer["data"]["saveEndpoint"]["warnings"] == []
