"""``/v1/billing`` through the in-process app on a real SQLite file: records per UTC bucket and
group from the usages the meter records, the caller's own alone, prices from ``SKIFF_PRICES``
(also a pod's ``costPerHr``), and a clear 400 for a query that cannot be answered."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from in_process import InProcess, running
from skiff.clock import ManualClock
from skiff.domain.billing import Usage, UsageKind

RTX = "NVIDIA GeForce RTX 4090"
PRICES = f"""
[gpu_hour]
"{RTX}" = 0.5
[cpu]
vcpu_hour = 0.02
[storage]
volume_gb_month = 0.1
"""
DAY = dt.datetime(2026, 11, 20, tzinfo=dt.UTC).timestamp()
#: That day, as the billing routes are asked for it.
THE_DAY = {"startTime": "2026-11-20T00:00:00Z", "endTime": "2026-11-21T00:00:00Z"}


@pytest.fixture
async def priced(tmp_path: Path) -> AsyncIterator[InProcess]:
    table = tmp_path / "prices.toml"
    table.write_text(PRICES)
    async with running(tmp_path / "data", prices=table) as app:
        yield app


async def admin_id(app: InProcess) -> str:
    return (await app.services.auth.authenticate(app_key(app))).id


def app_key(app: InProcess) -> str:
    return str(app.http.headers["Authorization"]).removeprefix("Bearer ")


async def worker_usage(
    app: InProcess, user_id: str, usage_id: str, start: float, end: float
) -> None:
    store = app.services.store
    usage = Usage(
        usage_id,
        user_id,
        UsageKind.WORKER,
        start,
        end,
        endpoint_id="ep1",
        instance_id=f"w-{usage_id}",
        gpu_type=RTX,
        gpu_count=2,
    )
    # Recorded ended: the server's own meter ends open usages that nothing holds.
    assert await store.open_usage(usage, f"worker:{usage_id}", end)


async def test_endpoint_records_are_per_bucket_and_priced(priced: InProcess) -> None:
    me = await admin_id(priced)
    await worker_usage(priced, me, "u1", DAY + 10 * 3600 + 1800, DAY + 12 * 3600)
    answer = await priced.http.get(
        "/v1/billing/endpoints",
        params={
            "bucketSize": "hour",
            **THE_DAY,
        },
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == [
        {
            "time": "2026-11-20T10:00:00.000Z",
            "amount": 0.5,
            "timeBilledMs": 1_800_000,
            "diskSpaceBilledGb": 0,
            "endpointId": "ep1",
            "podId": None,
            "gpuTypeId": None,
            "networkVolumeId": None,
        },
        {
            "time": "2026-11-20T11:00:00.000Z",
            "amount": 1.0,
            "timeBilledMs": 3_600_000,
            "diskSpaceBilledGb": 0,
            "endpointId": "ep1",
            "podId": None,
            "gpuTypeId": None,
            "networkVolumeId": None,
        },
    ]
    by_gpu = await priced.http.get(
        "/v1/billing/endpoints",
        params={
            "grouping": "gpuTypeId",
            **THE_DAY,
        },
    )
    (day,) = by_gpu.json()
    assert (day["gpuTypeId"], day["timeBilledMs"], day["amount"]) == (RTX, 5_400_000, 1.5)
    filtered = await priced.http.get(
        "/v1/billing/endpoints",
        params={
            "endpointId": "other",
            **THE_DAY,
        },
    )
    assert filtered.json() == []


async def test_each_filter_of_a_billing_query_reaches_the_records(priced: InProcess) -> None:
    me = await admin_id(priced)
    await worker_usage(priced, me, "u1", DAY + 3600, DAY + 7200)

    async def seconds(route: str, **filters: str) -> list[int]:
        answer = await priced.http.get(f"/v1/billing/{route}", params={**filters, **THE_DAY})
        assert answer.status_code == 200, answer.text
        return [record["timeBilledMs"] // 1000 for record in answer.json()]

    assert await seconds("endpoints", endpointId="ep1") == [3600]
    assert await seconds("endpoints", gpuTypeId=RTX) == [3600]
    assert await seconds("endpoints", gpuTypeId="NVIDIA A40") == []
    assert await seconds("endpoints", podId="a-pod") == []
    assert await seconds("pods", podId="a-pod", gpuTypeId=RTX) == []
    assert await seconds("networkvolumes", networkVolumeId="a-volume") == []


async def test_a_user_sees_only_their_own_usage(priced: InProcess) -> None:
    await worker_usage(priced, await admin_id(priced), "mine", DAY, DAY + 60)
    issued = await priced.services.auth.issue_key("bob", is_admin=False, label="test")
    bob_user = await priced.services.auth.authenticate(issued.key)
    await worker_usage(priced, bob_user.id, "bobs", DAY, DAY + 120)
    params = THE_DAY
    async with httpx.AsyncClient(
        transport=priced.transport,
        base_url=str(priced.http.base_url),
        headers={"Authorization": f"Bearer {issued.key}"},
    ) as bob:
        (bobs,) = (await bob.get("/v1/billing/endpoints", params=params)).json()
    (mine,) = (await priced.http.get("/v1/billing/endpoints", params=params)).json()
    assert (bobs["timeBilledMs"], mine["timeBilledMs"]) == (120_000, 60_000)


async def test_a_network_volume_and_a_pod_are_metered_and_priced(tmp_path: Path) -> None:
    table = tmp_path / "prices.toml"
    table.write_text(PRICES)
    # Time stands still but for the minute the test moves it on: the volume's time billed is
    # exactly that minute, from its creation on.
    clock = ManualClock(dt.datetime.now(dt.UTC).timestamp())
    async with running(tmp_path / "data", clock=clock, prices=table) as priced:
        await _volume_and_pod_metered(priced, clock)


async def _volume_and_pod_metered(priced: InProcess, clock: ManualClock) -> None:
    # A size any test machine has free: a volume must fit on the disk, and one of 73 GB was
    # refused now and then in CI once the suite's images had filled the disk.
    made = await priced.http.post("/v1/networkvolumes", json={"name": "v", "size": 3})
    assert made.status_code == 200, made.text
    volume = made.json()
    pod = await priced.http.post(
        "/v1/pods",
        json={
            "imageName": "local/python",
            "computeType": "CPU",
            "vcpuCount": 4,
            "volumeInGb": 0,
            "dockerStartCmd": [sys.executable, "-c", "import time; time.sleep(60)"],
        },
    )
    assert pod.json()["costPerHr"] == pytest.approx(0.08)  # 4 vCPUs at 0.02
    clock.advance(60)
    await priced.services.meter.pass_once()
    (record,) = (await priced.http.get("/v1/billing/networkvolumes")).json()
    assert record["networkVolumeId"] == volume["id"] and record["diskSpaceBilledGb"] == 3
    assert record["timeBilledMs"] == 60_000


@pytest.mark.parametrize(
    ("route", "params", "field", "says"),
    [
        ("endpoints", {"bucketSize": "fortnight"}, "bucketSize", "'hour', 'day'"),
        ("pods", {"grouping": "endpointId"}, "grouping", "podId, gpuTypeId"),
        ("endpoints", {"startTime": "yesterday"}, "startTime", "RFC 3339"),
        (
            "endpoints",
            {"startTime": "2026-11-20T00:00:00Z", "endTime": "2026-11-19T00:00:00Z"},
            "endTime",
            "after startTime",
        ),
        (
            "pods",
            {
                "bucketSize": "hour",
                "startTime": "2026-01-01T00:00:00Z",
                "endTime": "2026-11-01T00:00:00Z",
            },
            "startTime",
            "more than 1000 hour buckets",
        ),
        # Calendar buckets cannot be cut past year 9999 or before year 1: refused, not a 500.
        (
            "pods",
            {
                "bucketSize": "year",
                "startTime": "9999-06-01T00:00:00Z",
                "endTime": "9999-12-31T23:59:59Z",
            },
            "endTime",
            "not between 1970 and 9000",
        ),
        (
            "networkvolumes",
            {
                "bucketSize": "hour",
                "startTime": "9999-12-31T23:00:00-05:00",
                "endTime": "2026-11-01T00:00:00Z",
            },
            "startTime",
            "not between 1970 and 9000",
        ),
        (
            "endpoints",
            {"startTime": "0001-01-01T00:00:00+14:00", "endTime": "2026-11-01T00:00:00Z"},
            "startTime",
            "not between 1970 and 9000",
        ),
    ],
)
async def test_a_query_that_cannot_be_answered_is_refused_naming_the_field(
    in_process: InProcess, route: str, params: dict[str, str], field: str, says: str
) -> None:
    answer = await in_process.http.get(f"/v1/billing/{route}", params=params)
    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == field and says in answer.json()["message"], answer.json()


async def test_without_a_price_table_time_counts_and_amounts_are_zero(
    in_process: InProcess,
) -> None:
    await worker_usage(in_process, await admin_id(in_process), "u1", DAY, DAY + 60)
    params = THE_DAY
    (record,) = (await in_process.http.get("/v1/billing/endpoints", params=params)).json()
    assert (record["timeBilledMs"], record["amount"]) == (60_000, 0.0)
