"""``/v1/networkvolumes`` and an endpoint's ``networkVolumeId`` through the in-process app
(``conftest.py``): a real SQLite file and real directories under the data directory.

A volume is the user's alone; it is created only when the disk has room for its size, grows and
never shrinks, reports the disk space its files take, and cannot be deleted while an endpoint
names it. An endpoint names only a volume of its own user, and only on a server that can mount
it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from in_process import InProcess
from skiff.domain.volumes import BYTES_PER_GB, MAX_SIZE_GB
from skiff.providers import bubblewrap


async def create_volume(http: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    answer = await http.post("/v1/networkvolumes", json={"name": "data", "size": 1, **fields})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def volume_dir(app: InProcess, volume_id: str) -> Path:
    return app.services.settings.volumes_path() / volume_id


def free_gb(app: InProcess) -> int:
    """Whole GB the disk holding the volumes has free now."""
    root = app.services.settings.volumes_path()
    root.mkdir(parents=True, exist_ok=True)
    return shutil.disk_usage(root).free // BYTES_PER_GB


async def other_user(app: InProcess) -> httpx.AsyncClient:
    issued = await app.services.auth.issue_key("bob", is_admin=False, label="test")
    return httpx.AsyncClient(
        transport=app.transport,
        base_url=str(app.http.base_url),
        headers={"Authorization": f"Bearer {issued.key}"},
    )


def refusal(answer: httpx.Response, status: int, field: str | None = None) -> str:
    assert answer.status_code == status, answer.text
    body = answer.json()
    if field is not None:
        assert body.get("field") == field, body
    return str(body["message"])


# -- create, read ---------------------------------------------------------------------------


async def test_a_created_volume_is_a_directory_and_reads_back(in_process: InProcess) -> None:
    made = await create_volume(in_process.http, name="models", size=2, dataCenterId="EU-RO-1")
    assert made["name"] == "models" and made["size"] == 2 and made["dataCenterId"] == "EU-RO-1"
    assert made["usedBytes"] == 0 and made["createdAt"].endswith("Z")
    assert volume_dir(in_process, made["id"]).is_dir()
    got = await in_process.http.get(f"/v1/networkvolumes/{made['id']}")
    assert got.status_code == 200 and got.json() == made
    listed = await in_process.http.get("/v1/networkvolumes")
    assert listed.status_code == 200 and listed.json() == [made]


async def test_a_volume_without_a_data_center_is_in_this_one(in_process: InProcess) -> None:
    assert (await create_volume(in_process.http))["dataCenterId"] == "local"


async def test_used_bytes_counts_what_the_directory_holds(in_process: InProcess) -> None:
    made = await create_volume(in_process.http)
    folder = volume_dir(in_process, made["id"]) / "weights"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"\1" * 300_000)
    got = (await in_process.http.get(f"/v1/networkvolumes/{made['id']}")).json()
    assert got["usedBytes"] >= 300_000


async def test_a_volume_bigger_than_the_free_disk_is_refused_and_nothing_is_made(
    in_process: InProcess,
) -> None:
    too_big = free_gb(in_process) + 1
    if too_big > MAX_SIZE_GB:
        pytest.skip("this disk has more than 4000 GB free")
    answer = await in_process.http.post(
        "/v1/networkvolumes", json={"name": "huge", "size": too_big}
    )
    assert "does not fit" in refusal(answer, 400, "size")
    assert (await in_process.http.get("/v1/networkvolumes")).json() == []
    assert list(in_process.services.settings.volumes_path().iterdir()) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"size": 1}, "name"),
        ({"name": "", "size": 1}, "name"),
        ({"name": "x" * 192, "size": 1}, "name"),
        ({"name": "data"}, "size"),
        ({"name": "data", "size": -1}, "size"),
        ({"name": "data", "size": MAX_SIZE_GB + 1}, "size"),
        ({"name": "data", "size": "10"}, "size"),
        ({"name": "data", "size": 1.5}, "size"),
        ({"name": "data", "size": 1, "dataCenterId": ""}, "dataCenterId"),
        ({"name": "data", "size": 1, "mountPath": "/x"}, "mountPath"),
    ],
    ids=[
        "no-name",
        "empty-name",
        "long-name",
        "no-size",
        "negative-size",
        "size-over-4000",
        "size-as-text",
        "fractional-size",
        "empty-data-center",
        "unknown-field",
    ],
)
async def test_bad_input_is_refused_naming_the_field(
    in_process: InProcess, body: dict[str, Any], field: str
) -> None:
    refusal(await in_process.http.post("/v1/networkvolumes", json=body), 400, field)
    assert (await in_process.http.get("/v1/networkvolumes")).json() == []


# -- update -----------------------------------------------------------------------------------


async def test_a_volume_is_renamed_and_grown_by_patch_and_by_post_update(
    in_process: InProcess,
) -> None:
    made = await create_volume(in_process.http, size=1)
    url = f"/v1/networkvolumes/{made['id']}"
    grown = await in_process.http.patch(url, json={"size": 2})
    assert grown.status_code == 200 and grown.json()["size"] == 2
    assert grown.json()["name"] == "data"
    renamed = await in_process.http.post(f"{url}/update", json={"name": "weights"})
    assert renamed.status_code == 200
    assert renamed.json()["name"] == "weights" and renamed.json()["size"] == 2
    assert (await in_process.http.get(url)).json() == renamed.json()


async def test_a_volume_never_shrinks(in_process: InProcess) -> None:
    made = await create_volume(in_process.http, size=2)
    url = f"/v1/networkvolumes/{made['id']}"
    message = refusal(await in_process.http.patch(url, json={"size": 1, "name": "x"}), 400, "size")
    assert "never shrinks" in message and "2 GB" in message
    assert (await in_process.http.get(url)).json() == made


async def test_growing_past_the_free_disk_is_refused(in_process: InProcess) -> None:
    made = await create_volume(in_process.http, size=1)
    too_big = free_gb(in_process) + 2
    if too_big > MAX_SIZE_GB:
        pytest.skip("this disk has more than 4000 GB free")
    url = f"/v1/networkvolumes/{made['id']}"
    assert "does not fit" in refusal(
        await in_process.http.patch(url, json={"size": too_big}), 400, "size"
    )
    assert (await in_process.http.get(url)).json()["size"] == 1


# -- per user ----------------------------------------------------------------------------------


async def test_another_users_volume_is_not_found_and_cannot_be_attached(
    in_process: InProcess,
) -> None:
    mine = await create_volume(in_process.http)
    url = f"/v1/networkvolumes/{mine['id']}"
    async with await other_user(in_process) as bob:
        assert (await bob.get("/v1/networkvolumes")).json() == []
        refusal(await bob.get(url), 404)
        refusal(await bob.patch(url, json={"size": 5}), 404)
        refusal(await bob.delete(url), 404)
        template = await bob.post(
            "/v1/templates",
            json={"name": "t", "imageName": "local/w", "dockerStartCmd": ["python", "-c", "1"]},
        )
        answer = await bob.post(
            "/v1/endpoints",
            json={
                "templateId": template.json()["id"],
                "computeType": "CPU",
                "workersMax": 0,
                "networkVolumeId": mine["id"],
            },
        )
        assert mine["id"] in refusal(answer, 400, "networkVolumeId")
        assert (await bob.get("/v1/endpoints")).json() == []
    assert (await in_process.http.get(url)).json() == mine
    assert volume_dir(in_process, mine["id"]).is_dir()


# -- endpoints and delete -------------------------------------------------------------------


async def test_an_endpoint_naming_no_volume_of_its_user_is_refused(in_process: InProcess) -> None:
    template = await in_process.http.post(
        "/v1/templates",
        json={"name": "t", "imageName": "local/w", "dockerStartCmd": ["python", "-c", "1"]},
    )
    answer = await in_process.http.post(
        "/v1/endpoints",
        json={"templateId": template.json()["id"], "networkVolumeId": "no-such-volume"},
    )
    assert "no network volume no-such-volume" in refusal(answer, 400, "networkVolumeId")
    endpoint = await in_process.create_endpoint(workersMax=0)
    update = await in_process.http.patch(
        f"/v1/endpoints/{endpoint['id']}", json={"networkVolumeId": "no-such-volume"}
    )
    refusal(update, 400, "networkVolumeId")


@pytest.mark.skipif(bubblewrap.executable() is None, reason="bubblewrap (bwrap) is not installed")
async def test_an_attached_volume_is_not_deleted_until_no_endpoint_names_it(
    in_process: InProcess,
) -> None:
    volume = await create_volume(in_process.http)
    url = f"/v1/networkvolumes/{volume['id']}"
    one = await in_process.create_endpoint(workersMax=0, networkVolumeId=volume["id"])
    two = await in_process.create_endpoint(workersMax=0)
    assert one["networkVolumeId"] == volume["id"]
    # Attaching restarts workers: the volume is mounted when a worker starts.
    attached = await in_process.http.patch(
        f"/v1/endpoints/{two['id']}", json={"networkVolumeId": volume["id"]}
    )
    assert attached.status_code == 200 and attached.json()["version"] == two["version"] + 1

    message = refusal(await in_process.http.delete(url), 409)
    assert one["id"] in message and two["id"] in message
    assert volume_dir(in_process, volume["id"]).is_dir()

    for endpoint in (one, two):
        detached = await in_process.http.patch(
            f"/v1/endpoints/{endpoint['id']}", json={"networkVolumeId": None}
        )
        assert detached.status_code == 200 and "networkVolumeId" not in detached.json()
    assert (await in_process.http.delete(url)).status_code == 204
    assert not volume_dir(in_process, volume["id"]).exists()
    refusal(await in_process.http.get(url), 404)
    refusal(await in_process.http.delete(url), 404)


async def test_without_bwrap_an_endpoint_cannot_name_a_volume(
    in_process: InProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    volume = await create_volume(in_process.http)
    empty = tmp_path / "no-bwrap-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    template = await in_process.http.post(
        "/v1/templates",
        json={"name": "t", "imageName": "local/w", "dockerStartCmd": ["python", "-c", "1"]},
    )
    answer = await in_process.http.post(
        "/v1/endpoints",
        json={
            "templateId": template.json()["id"],
            "workersMax": 0,
            "networkVolumeId": volume["id"],
        },
    )
    message = refusal(answer, 400, "networkVolumeId")
    assert "cannot mount network volumes" in message and "bubblewrap" in message
    assert (await in_process.http.get("/v1/endpoints")).json() == []
