"""Worker logs: the last lines of an endpoint's workers (or one worker's), and a follow that
the page's script keeps up to date by asking for the lines since the last one it has."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console.base import Console, json_answer
from skiff.domain.endpoints import Endpoint
from skiff.domain.logs import LogLine, iso
from skiff.domain.workers import WorkerKind

TAIL_DEFAULT = 200
TAIL_CHOICES = (50, 200, 1000, 5000)


def tail_of(request: Request) -> int:
    """The ``tail`` asked for, if it is one of the choices; else the default."""
    raw = request.query_params.get("tail", "")
    return int(raw) if raw.isdigit() and int(raw) in TAIL_CHOICES else TAIL_DEFAULT


def since_of(request: Request) -> float | None:
    """The follow's ``since`` (epoch seconds); None without one (its first ask) or a number."""
    try:
        return float(request.query_params.get("since", ""))
    except ValueError:
        return None


def line_view(line: LogLine) -> dict[str, Any]:
    return {
        "worker": line.worker,
        "time": line.time,
        "stamp": iso(line.time) if line.time is not None else "",
        "line": line.line,
    }


def lines_answer(lines: Iterable[LogLine]) -> Response:
    """The follow's answer, for the pages' script (worker logs and a pod's log alike)."""
    return json_answer({"lines": [line_view(x) for x in lines]})


def routes(console: Console) -> list[BaseRoute]:
    services = console.services
    # This replica's files only, unlike the /v1 log route.
    worker_logs = services.logs.files

    async def read(
        endpoint: Endpoint, worker: str | None, since: float | None, tail: int
    ) -> list[LogLine]:
        return await asyncio.to_thread(worker_logs.read, endpoint.id, worker, since, tail)

    async def logs_page(request: Request) -> Response:
        visitor = await console.signed_in(request)
        endpoint = await console.endpoint(visitor, request)
        worker = request.query_params.get("worker") or None
        tail = tail_of(request)
        # A worker started outside skiff (a worker token) keeps its output where it runs: none
        # of it is here to pick.
        workers = sorted(
            set(await asyncio.to_thread(worker_logs.workers, endpoint.id))
            | {
                r.worker.id
                for r in await services.endpoints.workers_of(endpoint.id)
                if r.worker.kind is WorkerKind.LOCAL
            }
        )
        return console.page(
            request,
            "logs.html",
            visitor,
            title=f"Logs of {endpoint.spec.name}",
            endpoint=endpoint,
            worker=worker,
            workers=workers,
            tail=tail,
            tails=TAIL_CHOICES,
            lines=[line_view(x) for x in await read(endpoint, worker, None, tail)],
        )

    async def lines(request: Request) -> Response:
        """Lines stamped at or after ``since`` (epoch seconds), for the follow."""
        visitor = await console.signed_in(request)
        endpoint = await console.endpoint(visitor, request)
        worker = request.query_params.get("worker") or None
        return lines_answer(await read(endpoint, worker, since_of(request), tail_of(request)))

    return [
        Route("/endpoints/{endpoint_id}/logs", logs_page, methods=["GET"]),
        Route("/endpoints/{endpoint_id}/logs/lines.json", lines, methods=["GET"]),
    ]
