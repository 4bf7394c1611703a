"""Billing, pure: what was used (``Usage``: one instance's or one volume's time, as the store
keeps it), the price table, UTC-aligned buckets, and the records ``/v1/billing`` answers with.

Usage is kept as intervals, not as counters: a worker or a pod instance is one ``Usage`` from
its start to its end (open while it runs), a volume one per size it had. A record is then the
overlap of intervals with a bucket, split exactly at the bucket's boundaries, so nothing is
counted twice and a second belongs to exactly one bucket.
"""

from __future__ import annotations

import calendar
import datetime as dt
import enum
import math
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skiff.domain.containers import DEFAULT_FLAVOR
from skiff.domain.endpoints import ComputeType, EndpointSpec
from skiff.domain.jobs import Job

#: What the hosted platform counts a month of storage as (hours).
HOURS_PER_MONTH = 730.0
MS_PER_HOUR = 3_600_000
#: A query may ask for at most this many buckets (a year of days, ~41 days of hours).
MAX_BUCKETS = 1_000


class BucketSize(enum.StrEnum):
    HOUR = "hour"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    YEAR = "year"


class UsageKind(enum.StrEnum):
    #: A serverless worker holding its GPUs or vCPUs (from its start until it is gone).
    WORKER = "worker"
    #: A pod's instance holding its GPUs or vCPUs.
    POD = "pod"
    #: A network volume's storage, at one size.
    NETWORK_VOLUME = "network_volume"
    #: A pod's own volume, at one size.
    POD_VOLUME = "pod_volume"


COMPUTE_KINDS = (UsageKind.WORKER, UsageKind.POD)


@dataclass(frozen=True, slots=True)
class Usage:
    """One interval of use. ``ended_at`` None: still going (counted up to now)."""

    id: str
    user_id: str
    kind: UsageKind
    started_at: float
    ended_at: float | None = None
    endpoint_id: str | None = None
    pod_id: str | None = None
    #: The worker's id (a pod's own id for a pod instance).
    instance_id: str | None = None
    volume_id: str | None = None
    gpu_type: str | None = None
    gpu_count: int = 0
    #: A CPU worker's or pod's flavor (cpu3c, …) beside its vCPUs; None for a GPU one.
    cpu_flavor: str | None = None
    vcpus: int = 0
    disk_gb: int = 0


def flavor_of(flavors: Sequence[str]) -> str:
    """The flavor a CPU worker or pod runs as: the first it lists, else the default."""
    return str(flavors[0]) if flavors else str(DEFAULT_FLAVOR)


def call_usage(
    job: Job,
    spec: EndpointSpec,
    billed_as: str,
    gpu: str | None,
    gpu_ids: str | None,
    ended_at: float,
) -> Usage | None:
    """What a public model's caller is billed for one run of its job (one attempt), ended at
    ``ended_at``: its run time, at the rate of one worker of the endpoint (``spec``; ``gpu``
    and ``gpu_ids``, the worker that ran it, None when it is gone), under ``billed_as`` (the
    model's id). None for a job that is no caller's (the owner's own) or that never started.

    The usage's id names the run, ``call:<job>:<retries>:<attempt>`` (each start of a job
    raises one of the two), so a run recorded twice is one row: the store keeps the first."""
    if job.caller_id is None or job.started_at is None:
        return None
    gpus = len(gpu_ids.split(",")) if gpu_ids else 0
    cpu = spec.computeType is ComputeType.CPU or not gpus
    return Usage(
        id=f"call:{job.id}:{job.retries}:{job.attempt}",
        user_id=job.caller_id,
        kind=UsageKind.WORKER,
        started_at=job.started_at,
        ended_at=max(ended_at, job.started_at),
        endpoint_id=billed_as,
        instance_id=job.worker_id,
        gpu_type=None if cpu else gpu,
        gpu_count=0 if cpu else gpus,
        cpu_flavor=flavor_of(spec.cpuFlavorIds) if cpu else None,
        vcpus=spec.vcpuCount if cpu else 0,
    )


# -- buckets ------------------------------------------------------------------------------


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.UTC)


def bucket_start(ts: float, size: BucketSize) -> float:
    """The start of the UTC bucket holding ``ts``: the hour, the day, the ISO week (Monday),
    the calendar month or year."""
    at = _utc(ts)
    if size is BucketSize.HOUR:
        start = at.replace(minute=0, second=0, microsecond=0)
    elif size is BucketSize.DAY:
        start = at.replace(hour=0, minute=0, second=0, microsecond=0)
    elif size is BucketSize.WEEK:
        day = at.replace(hour=0, minute=0, second=0, microsecond=0)
        start = day - dt.timedelta(days=day.weekday())
    elif size is BucketSize.MONTH:
        start = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    else:
        start = at.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    return start.timestamp()


def next_bucket(start: float, size: BucketSize) -> float:
    """The start of the bucket after the one starting at ``start``."""
    at = _utc(start)
    if size is BucketSize.HOUR:
        return start + 3600
    if size is BucketSize.DAY:
        return (at + dt.timedelta(days=1)).timestamp()
    if size is BucketSize.WEEK:
        return (at + dt.timedelta(days=7)).timestamp()
    if size is BucketSize.MONTH:
        days = calendar.monthrange(at.year, at.month)[1]
        return (at + dt.timedelta(days=days)).timestamp()
    return at.replace(year=at.year + 1).timestamp()


def buckets(start: float, end: float, size: BucketSize) -> Iterator[float]:
    """The starts of the buckets that ``[start, end)`` touches."""
    current = bucket_start(start, size)
    while current < end:
        yield current
        current = next_bucket(current, size)


def bucket_count(start: float, end: float, size: BucketSize, limit: int = MAX_BUCKETS) -> int:
    """How many buckets ``[start, end)`` touches, counting no further than ``limit + 1``."""
    count = 0
    for _ in buckets(start, end, size):
        count += 1
        if count > limit:
            break
    return count


def split(start: float, end: float, size: BucketSize) -> Iterator[tuple[float, float, float]]:
    """``[start, end)`` cut at bucket boundaries: (bucket start, piece start, piece end)."""
    for bucket in buckets(start, end, size):
        following = next_bucket(bucket, size)
        yield bucket, max(start, bucket), min(end, following)


# -- prices -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Prices:
    """The operator's price table, in USD: per GPU per hour by type, per vCPU per hour, per GB
    of volume per month (``HOURS_PER_MONTH`` hours). A GPU type not in the table costs 0."""

    gpu_hour: dict[str, float] = field(default_factory=dict)
    vcpu_hour: float = 0.0
    volume_gb_month: float = 0.0

    def hourly(self, usage: Usage) -> float:
        """What ``usage`` costs per hour."""
        if usage.kind in COMPUTE_KINDS:
            if usage.gpu_count:
                return self.gpu_hour.get(usage.gpu_type or "", 0.0) * usage.gpu_count
            return self.vcpu_hour * usage.vcpus
        return self.volume_gb_month * usage.disk_gb / HOURS_PER_MONTH


NO_PRICES = Prices()


def _price(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: expected a number of USD, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: expected a finite price of 0 or more, got {value!r}")
    return float(value)


def parse_prices(text: str) -> Prices:
    """A price table in TOML::

        [gpu_hour]
        "NVIDIA GeForce RTX 4090" = 0.69
        [cpu]
        vcpu_hour = 0.02
        [storage]
        volume_gb_month = 0.07

    Raises ``ValueError`` naming what is wrong."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not TOML: {exc}") from None
    unknown = set(table) - {"gpu_hour", "cpu", "storage"}
    if unknown:
        raise ValueError(f"unknown section(s) {sorted(unknown)}: gpu_hour, cpu, storage")
    gpus = table.get("gpu_hour", {})
    if not isinstance(gpus, dict):
        raise ValueError("gpu_hour: expected a table of GPU type = USD per GPU per hour")
    cpu = table.get("cpu", {})
    storage = table.get("storage", {})
    for name, section, keys in (
        ("cpu", cpu, {"vcpu_hour"}),
        ("storage", storage, {"volume_gb_month"}),
    ):
        if not isinstance(section, dict) or set(section) - keys:
            raise ValueError(f"{name}: expected only {', '.join(sorted(keys))}")
    return Prices(
        gpu_hour={str(k): _price(v, f"gpu_hour.{k!r}") for k, v in gpus.items()},
        vcpu_hour=_price(cpu.get("vcpu_hour", 0.0), "cpu.vcpu_hour"),
        volume_gb_month=_price(storage.get("volume_gb_month", 0.0), "storage.volume_gb_month"),
    )


def load_prices(path: Path | None) -> Prices:
    """The table in ``path`` (``SKIFF_PRICES``), or every price 0 without one."""
    if path is None:
        return NO_PRICES
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"SKIFF_PRICES {path}: cannot read it: {exc.strerror}") from None
    try:
        return parse_prices(text)
    except ValueError as exc:
        raise ValueError(f"SKIFF_PRICES {path}: {exc}") from None


# -- records ------------------------------------------------------------------------------


class Grouping(enum.StrEnum):
    ENDPOINT_ID = "endpointId"
    POD_ID = "podId"
    GPU_TYPE_ID = "gpuTypeId"
    #: Network volumes' records, one per volume (skiff's own: the reference shows none).
    NETWORK_VOLUME_ID = "networkVolumeId"


@dataclass(slots=True)
class BillingRecord:
    """One bucket of one group: the reference's BillingRecord, with the volume's id beside."""

    time: float
    amount: float = 0.0
    timeBilledMs: int = 0
    diskSpaceBilledGb: int = 0
    endpointId: str | None = None
    podId: str | None = None
    gpuTypeId: str | None = None
    networkVolumeId: str | None = None


def _group_key(usage: Usage, grouping: Grouping) -> tuple[str | None, ...]:
    if grouping is Grouping.ENDPOINT_ID:
        return (usage.endpoint_id, None, None, None)
    if grouping is Grouping.POD_ID:
        return (
            usage.endpoint_id if usage.kind is UsageKind.WORKER else None,
            usage.pod_id,
            None,
            None,
        )
    if grouping is Grouping.GPU_TYPE_ID:
        return (None, None, usage.gpu_type, None)
    return (None, None, None, usage.volume_id)


def records(
    usages: Iterable[Usage],
    start: float,
    end: float,
    size: BucketSize,
    grouping: Grouping,
    prices: Prices,
    now: float,
) -> list[BillingRecord]:
    """Each bucket of ``[start, end)`` and group that has any use, oldest first: the amount at
    ``prices``, the milliseconds of compute billed (of storage, for network volumes' records),
    and the GB of storage billed (the largest size the group had in the bucket). A pod's record
    holds its instance's time and its volume's storage together. An open usage counts up to
    ``now``."""
    found: dict[tuple[float, tuple[str | None, ...]], BillingRecord] = {}
    for usage in usages:
        begin = max(usage.started_at, start)
        finish = min(usage.ended_at if usage.ended_at is not None else now, end)
        if finish <= begin:
            continue
        hourly = prices.hourly(usage)
        key = _group_key(usage, grouping)
        for bucket, piece_start, piece_end in split(begin, finish, size):
            ms = round(piece_end * 1000) - round(piece_start * 1000)
            if ms <= 0:
                continue
            record = found.get((bucket, key))
            if record is None:
                endpoint, pod, gpu, volume = key
                record = found[(bucket, key)] = BillingRecord(
                    time=bucket,
                    endpointId=endpoint,
                    podId=pod,
                    gpuTypeId=gpu,
                    networkVolumeId=volume,
                )
            record.amount += hourly * ms / MS_PER_HOUR
            if usage.kind in COMPUTE_KINDS or grouping is Grouping.NETWORK_VOLUME_ID:
                record.timeBilledMs += ms
            if usage.kind not in COMPUTE_KINDS:
                record.diskSpaceBilledGb = max(record.diskSpaceBilledGb, usage.disk_gb)
    return [found[k] for k in sorted(found, key=lambda k: (k[0], tuple(x or "" for x in k[1])))]


# -- queries ------------------------------------------------------------------------------


class Resource(enum.StrEnum):
    """What a billing route reports on: which usages, grouped how by default, and which
    groupings it takes."""

    ENDPOINTS = "endpoints"
    PODS = "pods"
    NETWORK_VOLUMES = "networkvolumes"


KINDS: dict[Resource, tuple[UsageKind, ...]] = {
    Resource.ENDPOINTS: (UsageKind.WORKER,),
    Resource.PODS: (UsageKind.POD, UsageKind.POD_VOLUME),
    Resource.NETWORK_VOLUMES: (UsageKind.NETWORK_VOLUME,),
}
GROUPINGS: dict[Resource, tuple[Grouping, ...]] = {
    Resource.ENDPOINTS: (Grouping.ENDPOINT_ID, Grouping.POD_ID, Grouping.GPU_TYPE_ID),
    Resource.PODS: (Grouping.POD_ID, Grouping.GPU_TYPE_ID),
    Resource.NETWORK_VOLUMES: (Grouping.NETWORK_VOLUME_ID,),
}
#: Without ``startTime``: this long before the end.
DEFAULT_RANGE_SECONDS = 30 * 86400


class BadQuery(ValueError):
    """A query parameter that cannot be answered; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class BillingQuery:
    resource: Resource
    start: float
    end: float
    size: BucketSize
    grouping: Grouping
    endpoint_id: str | None = None
    pod_id: str | None = None
    gpu_type_id: str | None = None
    network_volume_id: str | None = None

    def keeps(self, usage: Usage) -> bool:
        """Whether ``usage`` is one this query reports (its kinds and id filters)."""
        pod = usage.instance_id if usage.kind is UsageKind.WORKER else usage.pod_id
        return (
            usage.kind in KINDS[self.resource]
            and self.endpoint_id in (None, usage.endpoint_id)
            and self.pod_id in (None, pod)
            and self.gpu_type_id in (None, usage.gpu_type)
            and self.network_volume_id in (None, usage.volume_id)
        )


#: The times a billing query may name: its buckets are cut on calendar dates, which Python
#: cannot reach before year 1 or past 9999 (a month's bucket of December 9999 would end there).
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(9000, 1, 1, tzinfo=dt.UTC)


def _time(value: str, field: str) -> float:
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise BadQuery(field, f"{value!r} is not an RFC 3339 time (2026-11-01T00:00:00Z)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    try:
        within = EARLIEST <= parsed <= LATEST
    except OverflowError:  # an offset that takes it past year 1 or 9999
        within = False
    if not within:
        raise BadQuery(field, f"{value!r} is not between {EARLIEST.year} and {LATEST.year}")
    return parsed.timestamp()


def parse_query(
    resource: Resource,
    now: float,
    bucket_size: str | None = None,
    start_time: str | None = None,
    end_time: str | None = None,
    grouping: str | None = None,
    **ids: str | None,
) -> BillingQuery:
    """The query parameters of a billing route, checked; ``BadQuery`` naming the first that
    cannot be answered. ``ids``: ``endpointId``, ``podId``, ``gpuTypeId``, ``networkVolumeId``."""
    sizes = ", ".join(s.value for s in BucketSize)
    try:
        size = BucketSize(bucket_size or BucketSize.DAY)
    except ValueError:
        raise BadQuery("bucketSize", f"{bucket_size!r} is not one of {sizes}") from None
    allowed = GROUPINGS[resource]
    try:
        group = Grouping(grouping) if grouping else allowed[0]
    except ValueError:
        group = None
    if group not in allowed:
        names = ", ".join(g.value for g in allowed)
        raise BadQuery("grouping", f"{grouping!r}: the {resource.value} records group by {names}")
    end = _time(end_time, "endTime") if end_time else now
    start = _time(start_time, "startTime") if start_time else end - DEFAULT_RANGE_SECONDS
    if end <= start:
        raise BadQuery("endTime", "it must be after startTime")
    if bucket_count(start, end, size) > MAX_BUCKETS:
        raise BadQuery(
            "startTime",
            f"the range spans more than {MAX_BUCKETS} {size.value} buckets: "
            "ask for a shorter range or a larger bucketSize",
        )
    return BillingQuery(
        resource,
        start,
        end,
        size,
        group,
        endpoint_id=ids.get("endpointId"),
        pod_id=ids.get("podId"),
        gpu_type_id=ids.get("gpuTypeId"),
        network_volume_id=ids.get("networkVolumeId"),
    )
