"""Outside workers name themselves (``RUNPOD_POD_ID``), and two tenants may pick the same name:
a tenant who calls in first under a name another tenant's worker uses must neither keep that
worker out, nor learn that the name is in use, nor see or touch its jobs. Two users' endpoints
through the real routes, in process."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from in_process import InProcess, running_on

NAME = "gpu-box-1"


async def users_endpoint(app: InProcess, user: str) -> tuple[httpx.AsyncClient, str]:
    """A user the administrator makes, as a client (not opened yet), and an endpoint of
    theirs (no workers of skiff's own)."""
    key, _ = await app.new_user(user)
    async with app.as_user(key) as client:
        template = await client.post(
            "/v1/templates",
            json={"name": "t", "imageName": "local/w", "dockerStartCmd": ["python"]},
        )
        made = await client.post(
            "/v1/endpoints",
            json={"templateId": template.json()["id"], "computeType": "CPU", "workersMax": 0},
        )
    assert made.status_code == 200, made.text
    return app.as_user(key), str(made.json()["id"])


STORES = pytest.mark.parametrize("store", ["sqlite", "postgresql"])


@STORES
async def test_a_name_another_tenant_took_first_still_takes_and_finishes_its_own_jobs(
    store: str, tmp_path: Path
) -> None:
    async with running_on(store, tmp_path / "data", take_wait_seconds=0.1) as app:
        mallory, mallorys_endpoint = await users_endpoint(app, "mallory")
        alice, alices_endpoint = await users_endpoint(app, "alice")
        async with (
            await app.worker(mallorys_endpoint) as squatter,
            await app.worker(alices_endpoint) as worker,
            mallory,
            alice,
        ):
            take = f"job-take/{NAME}?job_in_progress=0"
            assert (await squatter.get(f"/v2/{mallorys_endpoint}/{take}")).status_code == 204
            job_id = (
                await alice.post(f"/v2/{alices_endpoint}/run", json={"input": {"n": 1}})
            ).json()["id"]

            # Not refused, and nothing says the name was anyone else's.
            taken = await worker.get(f"/v2/{alices_endpoint}/{take}")
            assert taken.status_code == 200, taken.text
            assert taken.json()["id"] == job_id
            # The squatter's worker neither gets the job nor can end it.
            assert (await squatter.get(f"/v2/{mallorys_endpoint}/{take}")).status_code == 204
            await squatter.post(
                f"/v2/{mallorys_endpoint}/job-done/{NAME}/{job_id}", json={"output": "forged"}
            )
            assert (await alice.get(f"/v2/{alices_endpoint}/status/{job_id}")).json()[
                "status"
            ] == "IN_PROGRESS"

            done = await worker.post(
                f"/v2/{alices_endpoint}/job-done/{NAME}/{job_id}", json={"output": {"ok": 1}}
            )
            assert done.status_code == 200, done.text
            status = (await alice.get(f"/v2/{alices_endpoint}/status/{job_id}")).json()
            assert status["status"] == "COMPLETED" and status["output"] == {"ok": 1}
            # Shown by the name the worker calls itself, in the job and among the workers.
            assert status["workerId"] == NAME
            listed = (
                await alice.get(f"/v1/endpoints/{alices_endpoint}?includeWorkers=true")
            ).json()["workers"]
            assert [(w["id"], w["kind"]) for w in listed] == [(NAME, "external")]
            theirs = (
                await mallory.get(f"/v1/endpoints/{mallorys_endpoint}?includeWorkers=true")
            ).json()["workers"]
            assert [w["id"] for w in theirs] == [NAME]


#: A name that cannot be one, and its answer: 400, but for a NUL, which no id of any route
#: holds (404, as everywhere).
BAD_NAMES = {
    "a NUL": ("gpu%00box", 404),
    "a lone surrogate": ("gpu%ED%A0%80box", 400),
    "too long": ("w" * 129, 400),
    "huge": ("w" * 5000, 400),
    "a space": ("gpu%20box", 400),
    "starting with a dot": (".hidden", 400),
}


@STORES
@pytest.mark.parametrize(("name", "status"), BAD_NAMES.values(), ids=BAD_NAMES.keys())
async def test_a_name_that_cannot_be_one_is_refused_and_records_nothing(
    store: str, name: str, status: int, tmp_path: Path
) -> None:
    async with running_on(store, tmp_path / "data", take_wait_seconds=0.1) as app:
        client, endpoint = await users_endpoint(app, "alice")
        async with await app.worker(endpoint) as worker, client:
            for route in (f"job-take/{name}?job_in_progress=0", f"ping/{name}"):
                refused = await worker.get(f"/v2/{endpoint}/{route}")
                assert refused.status_code == status, (route, refused.text)
                assert "error" in refused.json()
            listed = (await client.get(f"/v1/endpoints/{endpoint}?includeWorkers=true")).json()
            assert listed["workers"] == []
