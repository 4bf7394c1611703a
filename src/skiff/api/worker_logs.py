"""``/v1/pod/{worker_id}/logs``: one worker's log in the shape of the hosted platform's log
service, which runpod-flash reads (at ``RUNPOD_HAPI_URL``) while it waits for a call, to show
the worker's lines in ``flash dev``'s console. The same lines as ``/v1/endpoints/{id}/logs``,
each a string that starts with its time."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from skiff.api.documented_errors import NOT_FOUND
from skiff.api.log_lines import Tail
from skiff.api.needs import needs
from skiff.api.responses import json_response
from skiff.domain.logs import LogQuery
from skiff.domain.permissions import READ
from skiff.domain.times import iso
from skiff.domain.users import User
from skiff.errors import NotFound
from skiff.services.hub import Services
from skiff.services.peer_logs import LOCAL_HEADER


class WorkerLogOut(BaseModel):
    container: list[str] = Field(
        description="The worker's output, oldest first, each line `<ISO-8601 time> <text>`"
    )
    system: list[str] = Field(
        default_factory=list, description="Always empty: skiff keeps no log of its own per worker"
    )


def router(services: Services, user_dep: Any) -> APIRouter:
    worker_routes = APIRouter(prefix="/pod", tags=["workers"])
    UserDep = Annotated[User, Depends(user_dep)]

    @worker_routes.get("/{worker_id}/logs", response_model=WorkerLogOut, responses=NOT_FOUND)
    @needs(READ)
    async def worker_log(
        request: Request, worker_id: str, user: UserDep, tail: Tail = 1000
    ) -> Response:
        """A worker of one of your endpoints: its last `tail` lines (as runpod-flash asks
        for them). Another user's worker is not found, as one that does not exist."""
        worker = await services.workers.get(worker_id)
        try:
            if worker is None:
                raise NotFound("no such worker")
            await services.endpoints.get(user, worker.endpoint_id)
        except NotFound:
            raise NotFound(f"worker {worker_id} not found") from None
        query = LogQuery(worker.endpoint_id, worker_id, None, tail)
        lines = await services.logs.lines(
            query,
            local_only=request.headers.get(LOCAL_HEADER) == "1",
            credentials=request.headers.get("authorization"),
        )
        shown = [f"{iso(line.time)} {line.line}" if line.time else line.line for line in lines]
        return json_response({"container": shown, "system": []})

    return worker_routes
