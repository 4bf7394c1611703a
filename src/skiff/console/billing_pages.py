"""Billing: the current month's total, spend per day for the last 30 days as a chart broken down
by endpoint, pod and network volume, the same by resource as a table, and all of it as CSV."""

from __future__ import annotations

import csv
import datetime as dt
import io
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console.base import Console, Visitor
from skiff.console.billing_chart import Series, chart
from skiff.domain.billing import NO_PRICES, BucketSize, Resource, bucket_start
from skiff.services.billing import Spend

DAYS = 30
CSV_COLUMNS = (
    "day",
    "kind",
    "id",
    "name",
    "gpuTypeId",
    "timeBilledMs",
    "diskSpaceBilledGb",
    "amount",
)
KIND = {Resource.ENDPOINTS: "endpoint", Resource.PODS: "pod", Resource.NETWORK_VOLUMES: "volume"}


@dataclass(frozen=True, slots=True)
class Line:
    """One endpoint's, pod's or volume's part of the last 30 days."""

    kind: str
    thing_id: str
    name: str
    seconds: float
    disk_gb: int
    amount: float


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    async def names(visitor: Visitor) -> dict[tuple[Resource, str], str]:
        endpoints = await services.endpoints.all(visitor.user)
        named = {(Resource.ENDPOINTS, e.id): e.spec.name for e in endpoints}
        named |= {(Resource.PODS, p.id): p.spec.name for p in await services.pods.all(visitor.user)}
        named |= {
            (Resource.NETWORK_VOLUMES, v.id): v.name
            for v in await services.volumes.records(visitor.user)
        }
        return named

    async def last_days(visitor: Visitor) -> tuple[list[float], list[Spend]]:
        today = bucket_start(services.clock.now(), BucketSize.DAY)
        days = [today - (DAYS - 1 - i) * 86400 for i in range(DAYS)]
        spent = await services.billing.spend(visitor.user, days[0], today + 86400, BucketSize.DAY)
        return days, spent

    async def billing_page(request: Request) -> Response:
        visitor = await console.signed_in(request)
        days, spent = await last_days(visitor)
        named = await names(visitor)
        now = services.clock.now()
        month = bucket_start(now, BucketSize.MONTH)
        month_spend = await services.billing.spend(visitor.user, month, now, BucketSize.MONTH)
        series: dict[tuple[Resource, str], list[float]] = {}
        lines: dict[tuple[Resource, str], Line] = {}
        for item in spent:
            key = (item.resource, item.thing_id)
            name = named.get(key, f"{KIND[item.resource]} {item.thing_id} (deleted)")
            daily = series.setdefault(key, [0.0] * DAYS)
            daily[days.index(item.record.time)] += item.record.amount
            was = lines.get(key) or Line(KIND[item.resource], item.thing_id, name, 0.0, 0, 0.0)
            lines[key] = Line(
                was.kind,
                was.thing_id,
                was.name,
                was.seconds + item.record.timeBilledMs / 1000,
                max(was.disk_gb, item.record.diskSpaceBilledGb),
                was.amount + item.record.amount,
            )
        labels = [_day(d) for d in days]
        drawn = chart(
            labels,
            [Series(named.get(k, f"{KIND[k[0]]} {k[1]}"), v) for k, v in series.items()],
        )
        return console.page(
            request,
            "billing.html",
            visitor,
            title="Billing",
            chart=drawn,
            lines=sorted(lines.values(), key=lambda line: -line.amount),
            total=sum(line.amount for line in lines.values()),
            month_total=sum(s.record.amount for s in month_spend),
            month_start=month,
            priced=services.billing.prices != NO_PRICES,
        )

    async def billing_csv(request: Request) -> Response:
        visitor = await console.signed_in(request)
        _days, spent = await last_days(visitor)
        named = await names(visitor)
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for item in spent:
            record = item.record
            writer.writerow(
                [
                    _day(record.time),
                    KIND[item.resource],
                    item.thing_id,
                    _cell(named.get((item.resource, item.thing_id), "")),
                    record.gpuTypeId or "",
                    record.timeBilledMs,
                    record.diskSpaceBilledGb,
                    f"{record.amount:.6f}",
                ]
            )
        return Response(
            out.getvalue(),
            media_type="text/csv; charset=utf-8",
            headers={
                "Content-Disposition": 'attachment; filename="skiff-billing-last-30-days.csv"',
                "Cache-Control": "no-store",
            },
        )

    return [
        Route("/billing", billing_page, methods=["GET"]),
        Route("/billing.csv", billing_csv, methods=["GET"]),
    ]


def _day(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d")


def _cell(text: str) -> str:
    """A name as a CSV cell a spreadsheet will not run as a formula."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
