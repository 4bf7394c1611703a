"""``/v1/endpoints``: serverless endpoints (create, list, get, update by PATCH or POST
.../update, delete), each with its workers, why they fail to start or wait, and its workers' log."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from skiff.api import credentials
from skiff.api.documented_errors import BAD, NOT_FOUND
from skiff.api.needs import needs
from skiff.api.updates import patch_or_post_update
from skiff.domain import times
from skiff.domain.containers import shown_instance_ids
from skiff.domain.endpoints import Endpoint, EndpointCreate, EndpointSpec, EndpointUpdate
from skiff.domain.permissions import READ, WRITE, Access, read_endpoint
from skiff.domain.placement import BlockerCause
from skiff.domain.templates import Template
from skiff.domain.users import User
from skiff.domain.workers import WorkerReport
from skiff.services.hub import Services


class WorkerOut(BaseModel):
    id: str = Field(
        description="Its name: the id skiff gave a local worker, an external worker's own "
        "`RUNPOD_POD_ID`. Names are each endpoint's own: two endpoints' external workers may "
        "share one and stay apart"
    )
    state: str = Field(
        description="initializing, idle, running, throttled, unhealthy, stopping or standby"
    )
    kind: str = Field(description="local (started by skiff) or external")
    version: int
    startedAt: str = Field(description="When it started (ISO-8601, UTC, milliseconds)")
    lastSeen: str | None = Field(
        default=None, description="When it last called in (ISO-8601, UTC, milliseconds)"
    )
    gpu: str | None = Field(default=None, description="The GPU type it holds")
    gpuIds: str | None = Field(default=None, description="Its CUDA_VISIBLE_DEVICES, e.g. 0,1")
    pid: int | None = None
    jobs: list[str] = Field(default_factory=list, description="ids of the jobs it holds")
    replica: str | None = Field(
        default=None, description="The replica that started it and holds its log (local ones)"
    )


class WorkerFailureOut(BaseModel):
    error: str = Field(
        description="What failed; for a worker that ended right after its start, followed by "
        "the last line of its log that says why (e.g. a ModuleNotFoundError)"
    )
    failedStarts: int = Field(description="Failed starts in a row; each doubles the back-off")
    at: str
    nextStartAt: str = Field(description="When the scaler tries again")
    lastLogLines: list[str] = Field(description="The end of the failed worker's log")


class PlacementOut(BaseModel):
    cause: BlockerCause = Field(
        description="owner-disabled: an administrator disabled its owner's account, so no "
        "worker runs until it is enabled again; no-gpu: this server has no GPU that fits; "
        "no-sandbox: this server cannot make the sandbox another user's workers need; "
        "failing-starts: its workers fail to start (see lastWorkerFailure); worker-limit: "
        "held back by the server-wide worker limit (SKIFF_MAX_WORKERS); gpus-busy: waiting "
        "for a GPU of its types to free up"
    )
    reason: str = Field(description="Why its workers are not running, in words")


class EndpointOut(EndpointSpec):
    id: str
    userId: str
    version: int = Field(description="Bumped when the template or env changes (a rolling release)")
    createdAt: str
    template: Template | None = None
    workers: list[WorkerOut] | None = None
    lastWorkerFailure: WorkerFailureOut | None = Field(
        default=None, description="Why its workers fail to start, while they do (unhealthy)"
    )
    placement: PlacementOut | None = Field(
        default=None,
        description="Present while something keeps its workers from running, saying what: "
        "jobs wait in the queue meanwhile",
    )
    warnings: list[str] | None = Field(
        default=None,
        description="Only in the answers to create and update: what keeps the settings just "
        "saved from working on this server, in plain sentences (empty when nothing does). "
        "The endpoint is saved either way. Today one case: a GPU endpoint (`computeType` "
        "defaults to GPU) that no GPU of this server can serve, whose jobs would wait in the "
        "queue until they expire; it names `computeType: CPU` and `SKIFF_GPUS`",
    )


def worker_out(report: WorkerReport) -> WorkerOut:
    w = report.worker
    return WorkerOut(
        id=w.name,
        state=w.state.value,
        kind=w.kind.value,
        version=w.version,
        startedAt=times.iso(w.started_at),
        lastSeen=times.iso(w.last_seen) if w.last_seen is not None else None,
        gpu=w.gpu,
        gpuIds=w.gpu_ids,
        pid=w.pid,
        replica=w.owner,
        jobs=report.jobs,
    )


def router(services: Services, user_dep: Any) -> APIRouter:
    endpoints = APIRouter(prefix="/endpoints", tags=["endpoints"])
    UserDep = Annotated[User, Depends(user_dep)]

    async def render(
        user: User, endpoint: Endpoint, include_template: bool, include_workers: bool
    ) -> EndpointOut:
        out = EndpointOut(
            **endpoint.spec.model_dump(),
            id=endpoint.id,
            userId=endpoint.userId,
            version=endpoint.version,
            createdAt=times.iso(endpoint.createdAt),
        )
        out.instanceIds = shown_instance_ids(endpoint.spec)
        if include_template:
            out.template = await services.templates.get(user, endpoint.spec.templateId)
        failure = await services.fleet.failure(endpoint.id)
        if failure is not None:
            out.lastWorkerFailure = WorkerFailureOut(
                error=failure.error,
                failedStarts=failure.failed_starts,
                at=times.iso(failure.at),
                nextStartAt=times.iso(failure.next_start_at),
                lastLogLines=failure.last_log_lines,
            )
        blocker = await services.placement.why(endpoint)
        if blocker is not None:
            out.placement = PlacementOut(cause=blocker.cause, reason=blocker.reason)
        if include_workers:
            out.workers = [worker_out(r) for r in await services.endpoints.workers_of(endpoint.id)]
        return out

    async def saved(user: User, endpoint: Endpoint) -> EndpointOut:
        """The answer to a create or update: the endpoint with what its settings warn of."""
        out = await render(user, endpoint, False, False)
        out.warnings = services.placement.warnings(endpoint)
        return out

    IncludeTemplate = Annotated[bool, Query(alias="includeTemplate")]
    IncludeWorkers = Annotated[bool, Query(alias="includeWorkers")]

    @endpoints.post("", response_model=EndpointOut, response_model_exclude_none=True, responses=BAD)
    @needs(WRITE)
    async def create_endpoint(body: EndpointCreate, user: UserDep) -> EndpointOut:
        """Create a serverless endpoint; its job URL is `/v2/{id}/`. The answer's `warnings`
        say what keeps its settings from working on this server (e.g. a GPU endpoint on a
        server without GPUs)."""
        return await saved(user, await services.endpoints.create(user, body))

    @endpoints.get("", response_model=list[EndpointOut], response_model_exclude_none=True)
    @needs(READ)
    async def list_endpoints(
        user: UserDep,
        include_template: IncludeTemplate = False,
        include_workers: IncludeWorkers = False,
    ) -> list[EndpointOut]:
        return [
            await render(user, e, include_template, include_workers)
            for e in await services.endpoints.all(user)
        ]

    @endpoints.get(
        "/{endpoint_id}",
        response_model=EndpointOut,
        response_model_exclude_none=True,
        responses=NOT_FOUND,
    )
    @needs(read_endpoint())
    async def get_endpoint(
        endpoint_id: str,
        user: UserDep,
        request: Request,
        include_template: IncludeTemplate = False,
        include_workers: IncludeWorkers = False,
    ) -> EndpointOut:
        """With `includeTemplate`, the key must also read the account (as `/v1/templates`
        asks): a template's `env` often holds secrets, and a restricted key reaches only its
        endpoints, not what they run."""
        if include_template:
            key = credentials.api_key(request.headers.get("authorization"))
            (await services.auth.caller(key)).check(Access.READ)
        endpoint = await services.endpoints.get(user, endpoint_id)
        return await render(user, endpoint, include_template, include_workers)

    @patch_or_post_update(
        endpoints,
        "/{endpoint_id}",
        response_model=EndpointOut,
        response_model_exclude_none=True,
        responses={**BAD, **NOT_FOUND},
    )
    @needs(WRITE)
    async def update_endpoint(endpoint_id: str, body: EndpointUpdate, user: UserDep) -> EndpointOut:
        """Changing the template, env, GPU settings or network volume bumps `version` and
        rolls the workers: new ones start with the new settings, old ones finish their job and
        stop. The answer's `warnings` are those of create."""
        return await saved(user, await services.endpoints.update(user, endpoint_id, body))

    @endpoints.delete("/{endpoint_id}", status_code=204, responses=NOT_FOUND)
    @needs(WRITE)
    async def delete_endpoint(endpoint_id: str, user: UserDep) -> Response:
        """Stops its workers and removes it with its jobs and logs, permanently."""
        await services.endpoints.delete(user, endpoint_id)
        return Response(status_code=204)

    return endpoints
