"""Outside workers (any id an endpoint's token names becomes one): their ids are ids, and one
endpoint has at most ``MAX_OUTSIDE_WORKERS`` of them on record. Every pass of the server's
loops reads each record, so a worker making new ids by the ten thousand would slow every
tenant's."""

from __future__ import annotations

import pytest

from in_process import InProcess
from skiff.domain.workers import outside_id_problem, outside_key
from skiff.services import workers as workers_service


async def test_an_endpoint_takes_outside_workers_up_to_its_bound_then_429(
    in_process: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers_service, "MAX_OUTSIDE_WORKERS", 3)
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    async with await in_process.worker(endpoint_id) as worker:
        for n in range(3):
            assert (await worker.get(f"/v2/{endpoint_id}/ping/outside-{n}")).status_code == 200
        refused = await worker.get(f"/v2/{endpoint_id}/ping/outside-3")
        assert refused.status_code == 429, refused.text
        assert "3 outside workers" in refused.json()["error"]
        assert refused.headers["retry-after"] == "60"
        # The ones on record go on calling in.
        assert (await worker.get(f"/v2/{endpoint_id}/ping/outside-0")).status_code == 200
    ids = {w.id for w in await in_process.services.store.list_workers(endpoint_id)}
    assert ids == {outside_key(endpoint_id, f"outside-{n}") for n in range(3)}


async def test_a_new_worker_id_that_is_no_id_is_refused(in_process: InProcess) -> None:
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    async with await in_process.worker(endpoint_id) as worker:
        for bad in ("x" * 129, "-leading-dash", "sp ace", "semi;colon"):
            refused = await worker.get(f"/v2/{endpoint_id}/ping/{bad}")
            assert refused.status_code == 400, (bad, refused.text)
            assert "is not one" in refused.json()["error"]
    assert await in_process.services.store.list_workers(endpoint_id) == []


def test_worker_ids_as_the_sdk_and_the_hosted_platform_make_them_are_ids() -> None:
    for good in ("a1b2c3d4e5f6g7", "worker-1", "gpu-node_3.local:7", "w@host", "x" * 128):
        assert outside_id_problem(good) is None, good
