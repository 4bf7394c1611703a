"""``/v1/endpoints/{id}/logs`` and ``/v1/pods/{id}/logs``: what an endpoint's workers and a pod
printed, read or followed. The two answer alike (``log_lines.py``); they differ in whose lines
they read and who may read them."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from skiff.api import pods
from skiff.api.documented_errors import BAD, NOT_FOUND
from skiff.api.log_lines import (
    FOLLOWED,
    Follow,
    LogsOut,
    Since,
    Tail,
    key_still_reads,
    lines_json,
    ndjson_stream,
    parse_since,
)
from skiff.api.needs import needs
from skiff.domain.logs import LogQuery
from skiff.domain.permissions import READ, read_endpoint
from skiff.domain.users import User
from skiff.services.hub import Services
from skiff.services.peer_logs import LOCAL_HEADER


def router(services: Services, user_dep: Any) -> APIRouter:
    logs = APIRouter()
    UserDep = Annotated[User, Depends(user_dep)]

    @logs.get(
        "/endpoints/{endpoint_id}/logs",
        response_model=LogsOut,
        responses={**BAD, **NOT_FOUND, **FOLLOWED},
        tags=["endpoints"],
    )
    @needs(read_endpoint())
    async def endpoint_logs(
        request: Request,
        endpoint_id: str,
        user: UserDep,
        worker: Annotated[
            str | None, Query(description="Only this worker's lines (its id)")
        ] = None,
        since: Since = None,
        tail: Tail = 1000,
        follow: Follow = False,
    ) -> Response:
        """The output (stdout and stderr) of the endpoint's local workers, merged by time, or of
        one worker. Each worker's log is kept on disk, capped at `SKIFF_LOG_MAX_BYTES` per file
        with `SKIFF_LOG_BACKUPS` rotated files, and removed with the endpoint. With several
        replicas, any of them answers with every replica's lines; a followed log comes from the
        leader, which runs the workers."""
        await services.endpoints.get(user, endpoint_id)
        since_ts = parse_since(since)
        local_only = request.headers.get(LOCAL_HEADER) == "1"
        auth = request.headers.get("authorization")
        query = LogQuery(endpoint_id, worker, since_ts, tail)
        if not follow:
            lines = await services.logs.lines(query, local_only=local_only, credentials=auth)
            return lines_json(lines)
        followed = await services.logs.follow(
            user.id,
            query,
            local_only=local_only,
            credentials=auth,
            still_allowed=key_still_reads(services.auth, auth, endpoint_id),
        )
        return ndjson_stream(followed)

    @logs.get(
        "/pods/{pod_id}/logs",
        response_model=LogsOut,
        responses={**BAD, **pods.NOT_FOUND, **FOLLOWED},
        tags=["pods"],
    )
    @needs(READ)
    async def pod_logs(
        request: Request,
        pod_id: str,
        user: UserDep,
        since: Since = None,
        tail: Tail = 1000,
        follow: Follow = False,
    ) -> Response:
        """The pod's output (stdout and stderr) across its starts, oldest first:
        `{"lines": [{"worker", "time", "line"}]}` with `worker` the pod's id. A pod runs on the
        leader replica, which keeps its log."""
        await services.pods.get(user, pod_id)
        since_ts = parse_since(since)
        if not follow:
            return lines_json(await services.pod_logs.lines(pod_id, since_ts, tail))
        reads = key_still_reads(services.auth, request.headers.get("authorization"), None)
        batches = await services.pod_logs.follow(user.id, pod_id, since_ts, tail, reads)
        return ndjson_stream(batches)

    return logs
