"""Billing, pure (``domain/billing``): UTC buckets, intervals split exactly at their
boundaries, prices applied per GPU, per vCPU and per GB-month, the price table's file, and
what a public model's caller's run is billed as."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import pytest

from service_stubs import a_job
from skiff.domain.billing import (
    MAX_BUCKETS,
    BucketSize,
    Grouping,
    Prices,
    Usage,
    UsageKind,
    bucket_count,
    bucket_start,
    call_usage,
    load_prices,
    next_bucket,
    parse_prices,
    records,
)
from skiff.domain.endpoints import ComputeType, CpuFlavor, EndpointSpec
from skiff.domain.jobs import JobStatus

RTX = "NVIDIA GeForce RTX 4090"
PRICES = Prices(gpu_hour={RTX: 0.5}, vcpu_hour=0.01, volume_gb_month=0.73)


def at(text: str) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()


def worker(start: float, end: float | None, **fields: object) -> Usage:
    given: dict[str, object] = {
        "id": "u1",
        "user_id": "alice",
        "kind": UsageKind.WORKER,
        "started_at": start,
        "ended_at": end,
        "endpoint_id": "ep1",
        "instance_id": "w1",
        "gpu_type": RTX,
        "gpu_count": 1,
        **fields,
    }
    return Usage(**given)  # type: ignore[arg-type]


def test_ninety_minutes_across_an_hour_boundary_bill_two_hour_buckets_exactly() -> None:
    start = at("2026-11-20 10:30:00")
    found = records(
        [worker(start, start + 90 * 60)],
        at("2026-11-20 00:00:00"),
        at("2026-11-21 00:00:00"),
        BucketSize.HOUR,
        Grouping.ENDPOINT_ID,
        PRICES,
        now=at("2026-11-22 00:00:00"),
    )
    assert [(r.time, r.timeBilledMs) for r in found] == [
        (at("2026-11-20 10:00:00"), 30 * 60 * 1000),
        (at("2026-11-20 11:00:00"), 60 * 60 * 1000),
    ]
    assert [r.amount for r in found] == pytest.approx([0.25, 0.5])
    assert {r.endpointId for r in found} == {"ep1"}


def test_two_gpus_cost_twice_one() -> None:
    start = at("2026-11-20 10:00:00")
    window = (start, start + 3600, BucketSize.HOUR, Grouping.ENDPOINT_ID, PRICES)
    (one,) = records([worker(start, start + 3600)], *window, now=start + 3600)
    (two,) = records([worker(start, start + 3600, gpu_count=2)], *window, now=start + 3600)
    assert two.amount == pytest.approx(2 * one.amount) and two.amount == pytest.approx(1.0)
    assert two.timeBilledMs == one.timeBilledMs == 3_600_000


def test_a_cpu_worker_is_priced_per_vcpu() -> None:
    start = at("2026-11-20 10:00:00")
    (record,) = records(
        [worker(start, start + 1800, gpu_type=None, gpu_count=0, vcpus=4)],
        start,
        start + 3600,
        BucketSize.HOUR,
        Grouping.ENDPOINT_ID,
        PRICES,
        now=start + 3600,
    )
    assert record.amount == pytest.approx(0.01 * 4 / 2)


def test_a_stopped_pod_bills_its_volume_but_no_gpu_time() -> None:
    start = at("2026-11-20 10:00:00")
    pod = worker(
        start, start + 3600, kind=UsageKind.POD, endpoint_id=None, pod_id="p1", instance_id="p1"
    )
    volume = Usage("u2", "alice", UsageKind.POD_VOLUME, start, None, pod_id="p1", disk_gb=10)
    found = records(
        [pod, volume],
        start,
        start + 7200,
        BucketSize.HOUR,
        Grouping.POD_ID,
        PRICES,
        now=start + 7200,
    )
    running, stopped = found
    # One record per pod and hour: its instance's time, its volume's storage, both priced.
    assert (running.time, running.timeBilledMs, running.diskSpaceBilledGb) == (start, 3_600_000, 10)
    assert running.amount == pytest.approx(0.5 + 0.73 * 10 / 730)
    assert (stopped.time, stopped.timeBilledMs, stopped.diskSpaceBilledGb) == (start + 3600, 0, 10)
    assert stopped.podId == "p1" and stopped.amount == pytest.approx(0.73 * 10 / 730)


def test_an_open_usage_counts_up_to_now_and_not_past_the_range() -> None:
    start = at("2026-11-20 10:00:00")
    (record,) = records(
        [worker(start, None)],
        start,
        start + 3600,
        BucketSize.HOUR,
        Grouping.ENDPOINT_ID,
        PRICES,
        now=start + 600,
    )
    assert record.timeBilledMs == 600_000


@pytest.mark.parametrize(
    ("size", "inside", "start", "following"),
    [
        ("hour", "2026-11-25 13:59:59", "2026-11-25 13:00:00", "2026-11-25 14:00:00"),
        ("day", "2026-11-25 23:59:59", "2026-11-25 00:00:00", "2026-11-26 00:00:00"),
        # ISO weeks start on Monday: 2026-11-23 is one.
        ("week", "2026-11-29 23:00:00", "2026-11-23 00:00:00", "2026-11-30 00:00:00"),
        ("month", "2026-02-28 12:00:00", "2026-02-01 00:00:00", "2026-03-01 00:00:00"),
        ("month", "2028-02-29 12:00:00", "2028-02-01 00:00:00", "2028-03-01 00:00:00"),
        ("year", "2026-12-31 23:59:59", "2026-01-01 00:00:00", "2027-01-01 00:00:00"),
    ],
)
def test_buckets_line_up_with_utc_calendar_boundaries(
    size: str, inside: str, start: str, following: str
) -> None:
    bucket = bucket_start(at(inside), BucketSize(size))
    assert bucket == at(start)
    assert next_bucket(bucket, BucketSize(size)) == at(following)


def test_a_month_bucket_splits_a_usage_at_midnight_utc_of_the_first() -> None:
    start, end = at("2026-01-31 23:00:00"), at("2026-02-01 01:00:00")
    found = records(
        [worker(start, end)],
        at("2026-01-01 00:00:00"),
        at("2026-03-01 00:00:00"),
        BucketSize.MONTH,
        Grouping.GPU_TYPE_ID,
        PRICES,
        now=end,
    )
    assert [(r.time, r.timeBilledMs, r.gpuTypeId) for r in found] == [
        (at("2026-01-01 00:00:00"), 3_600_000, RTX),
        (at("2026-02-01 00:00:00"), 3_600_000, RTX),
    ]


def test_bucket_count_stops_past_the_limit() -> None:
    start = at("2026-01-01 00:00:00")
    assert bucket_count(start, start + 24 * 3600, BucketSize.HOUR) == 24
    assert bucket_count(start, start + 10 * 365 * 86400, BucketSize.HOUR) == MAX_BUCKETS + 1


def test_a_price_table_reads_gpus_vcpus_and_storage() -> None:
    prices = parse_prices(
        f'[gpu_hour]\n"{RTX}" = 0.69\n[cpu]\nvcpu_hour = 0.02\n[storage]\nvolume_gb_month = 0.07\n'
    )
    assert prices == Prices(gpu_hour={RTX: 0.69}, vcpu_hour=0.02, volume_gb_month=0.07)
    assert parse_prices("") == Prices()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[gpu_hour\n", "not TOML"),
        ("[gpus]\n", "unknown section"),
        ('[gpu_hour]\n"A" = -1\n', "0 or more"),
        ('[gpu_hour]\n"A" = "cheap"\n', "expected a number"),
        ("[cpu]\nper_core = 1\n", "expected only vcpu_hour"),
        ("[storage]\nvolume_gb_month = nan\n", "finite"),
    ],
)
def test_a_bad_price_table_is_refused_saying_what(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_prices(text)


def test_the_price_table_file_is_read_or_its_problem_named(tmp_path: Path) -> None:
    assert load_prices(None) == Prices()
    table = tmp_path / "prices.toml"
    table.write_text("[cpu]\nvcpu_hour = 0.5\n")
    assert load_prices(table) == Prices(vcpu_hour=0.5)
    with pytest.raises(ValueError, match=r"SKIFF_PRICES .*missing\.toml: cannot read it"):
        load_prices(tmp_path / "missing.toml")


#: bob's job "j1" on "ep1", run a second time (after one retry) by "w-1" from 110.
CALLERS_RUN = a_job(
    status=JobStatus.COMPLETED,
    submitted_at=100.0,
    started_at=110.0,
    worker_id="w-1",
    caller_id="bob",
    attempt=2,
    retries=1,
)


def test_a_callers_run_is_billed_one_worker_of_the_endpoint_under_the_model_id() -> None:
    gpu = EndpointSpec(name="e", templateId="t")
    usage = call_usage(CALLERS_RUN, gpu, "m1", RTX, "0,1", ended_at=117.0)
    assert usage == Usage(
        id="call:j1:1:2",
        user_id="bob",
        kind=UsageKind.WORKER,
        started_at=110.0,
        ended_at=117.0,
        endpoint_id="m1",
        instance_id="w-1",
        gpu_type=RTX,
        gpu_count=2,
    )
    cpu = EndpointSpec(
        name="e",
        templateId="t",
        computeType=ComputeType.CPU,
        cpuFlavorIds=[CpuFlavor.cpu5c],
        vcpuCount=4,
    )
    on_cpu = call_usage(CALLERS_RUN, cpu, "m1", None, None, ended_at=117.0)
    assert on_cpu is not None
    assert (on_cpu.gpu_type, on_cpu.gpu_count, on_cpu.cpu_flavor, on_cpu.vcpus) == (
        None,
        0,
        "cpu5c",
        4,
    )


def test_only_a_callers_run_that_started_is_billed_and_never_before_its_start() -> None:
    spec = EndpointSpec(name="e", templateId="t")
    assert call_usage(replace(CALLERS_RUN, caller_id=None), spec, "m1", RTX, "0", 117.0) is None
    assert call_usage(replace(CALLERS_RUN, started_at=None), spec, "m1", RTX, "0", 117.0) is None
    early = call_usage(CALLERS_RUN, spec, "m1", RTX, "0", ended_at=105.0)
    assert early is not None and early.ended_at == 110.0
