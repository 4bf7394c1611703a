"""``/v1``: the management REST interface (registry auths, templates, endpoints, network
volumes, the webhook signing secret)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.openapi.utils import get_openapi
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, Field
from starlette.responses import Response

from skiff.api import billing, credentials, errors, models, pods, registry_auths, templates
from skiff.api.log_lines import (
    FOLLOWED,
    LogsOut,
    Since,
    Tail,
    log_line,
    ndjson_stream,
    parse_since,
)
from skiff.api.openapi3 import document_errors, downgrade_to_3_0
from skiff.api.responses import NO_TELEMETRY, json_response
from skiff.body_gate import BodyGate
from skiff.domain import times
from skiff.domain.containers import shown_instance_ids
from skiff.domain.endpoints import Endpoint, EndpointCreate, EndpointSpec, EndpointUpdate
from skiff.domain.placement import BlockerCause
from skiff.domain.templates import Template
from skiff.domain.users import User
from skiff.domain.volumes import NetworkVolumeCreate, NetworkVolumeUpdate, VolumeReport
from skiff.domain.workers import WorkerReport
from skiff.services.hub import Services
from skiff.services.peer_logs import LOCAL_HEADER


class WorkerOut(BaseModel):
    id: str
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


class WebhookSecretOut(BaseModel):
    secret: str = Field(
        description="Standard Webhooks signing secret: `whsec_` + base64 of 32 random bytes"
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
        description="no-gpu: this server has no GPU that fits; failing-starts: its workers "
        "fail to start (see lastWorkerFailure); worker-limit: held back by the server-wide "
        "worker limit (SKIFF_MAX_WORKERS); gpus-busy: waiting for a GPU of its types to free up"
    )
    reason: str = Field(description="Why its workers are not running, in words")


class NetworkVolumeOut(BaseModel):
    id: str
    name: str
    size: int = Field(description="GB (of 2^30 bytes): the quota it was given")
    dataCenterId: str
    usedBytes: int = Field(
        description="The disk space its files take now (allocated blocks, as `du` counts "
        "them), read when asked. It may pass `size`: writes are not stopped there"
    )
    createdAt: str = Field(description="When it was created (ISO-8601, UTC, milliseconds)")


def _volume_out(report: VolumeReport) -> NetworkVolumeOut:
    v = report.volume
    return NetworkVolumeOut(
        id=v.id,
        name=v.name,
        size=v.size,
        dataCenterId=v.dataCenterId,
        usedBytes=report.used_bytes,
        createdAt=times.iso(v.createdAt),
    )


#: The largest request body ``/v1`` takes (a template with a long readme and env fits easily).
BODY_LIMIT = 1024 * 1024
#: The scope key under which ``BodyGate`` leaves the caller it checked before the body.
USER = "skiff.user"


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


def _worker_out(report: WorkerReport) -> WorkerOut:
    w = report.worker
    return WorkerOut(
        id=w.id,
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


NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "Not found (or not yours)"}}
BAD: dict[int | str, dict[str, Any]] = {
    400: {"description": "A field is invalid; `field` names it"}
}


def build(services: Services) -> FastAPI:
    async def current_user(request: Request) -> User:
        checked: User | None = request.scope.get(USER)
        if checked is not None:  # a request with a body: checked before it was read
            return checked
        return await services.auth.authenticate(
            credentials.api_key(request.headers.get("authorization"))
        )

    async def admit(request: Request) -> int:
        key = credentials.api_key(request.headers.get("authorization"))
        request.scope[USER] = await services.auth.authenticate(key)
        return BODY_LIMIT

    UserDep = Annotated[User, Depends(current_user)]

    app = FastAPIOffline(
        title="skiff management API",
        telemetry=NO_TELEMETRY,
        version="0.1.0",
        description=(
            "Management REST interface of skiff: container registry auths, templates, "
            "serverless endpoints (queue-based, or load balancing with `type: LB`: their "
            "requests go to `/lb/{endpointId}/...`, passed to the workers' own HTTP servers), "
            "network volumes, pods, billing, public models and the webhook signing secret. "
            "Authenticate with `Authorization: Bearer <API key>`. "
            'Errors are `{"message": ...}`. Another user\'s ids answer 404.'
        ),
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
        responses={401: {"description": "Missing or invalid API key"}},
    )
    errors.install(app, "message")
    # The key is checked, and the body's size with it, before FastAPI reads a body.
    app.add_middleware(BodyGate, admit=admit, refuse=errors.responder("message"))

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
                servers=[{"url": "/v1"}],
            )
            schema["components"]["securitySchemes"] = {
                "bearerAuth": {"type": "http", "scheme": "bearer"}
            }
            schema["security"] = [{"bearerAuth": []}]
            app.openapi_schema = downgrade_to_3_0(
                document_errors(schema, "message", ("400", "401", "404", "409", "413"))
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    # -- endpoints ----------------------------------------------------------------------
    endpoints = APIRouter(prefix="/endpoints", tags=["endpoints"])

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
            out.workers = [_worker_out(r) for r in await services.endpoints.workers_of(endpoint.id)]
        return out

    async def saved(user: User, endpoint: Endpoint) -> EndpointOut:
        """The answer to a create or update: the endpoint with what its settings warn of."""
        out = await render(user, endpoint, False, False)
        out.warnings = services.placement.warnings(endpoint)
        return out

    IncludeTemplate = Annotated[bool, Query(alias="includeTemplate")]
    IncludeWorkers = Annotated[bool, Query(alias="includeWorkers")]

    @endpoints.post("", response_model=EndpointOut, response_model_exclude_none=True, responses=BAD)
    async def create_endpoint(body: EndpointCreate, user: UserDep) -> EndpointOut:
        """Create a serverless endpoint; its job URL is `/v2/{id}/`. The answer's `warnings`
        say what keeps its settings from working on this server (e.g. a GPU endpoint on a
        server without GPUs)."""
        return await saved(user, await services.endpoints.create(user, body))

    @endpoints.get("", response_model=list[EndpointOut], response_model_exclude_none=True)
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
    async def get_endpoint(
        endpoint_id: str,
        user: UserDep,
        include_template: IncludeTemplate = False,
        include_workers: IncludeWorkers = False,
    ) -> EndpointOut:
        endpoint = await services.endpoints.get(user, endpoint_id)
        return await render(user, endpoint, include_template, include_workers)

    @endpoints.patch(
        "/{endpoint_id}",
        response_model=EndpointOut,
        response_model_exclude_none=True,
        responses={**BAD, **NOT_FOUND},
    )
    async def update_endpoint(endpoint_id: str, body: EndpointUpdate, user: UserDep) -> EndpointOut:
        """Changing the template, env, GPU settings or network volume bumps `version` and
        rolls the workers: new ones start with the new settings, old ones finish their job and
        stop. The answer's `warnings` are those of create."""
        return await saved(user, await services.endpoints.update(user, endpoint_id, body))

    @endpoints.post(
        "/{endpoint_id}/update",
        response_model=EndpointOut,
        response_model_exclude_none=True,
        responses={**BAD, **NOT_FOUND},
    )
    async def update_endpoint_post(
        endpoint_id: str, body: EndpointUpdate, user: UserDep
    ) -> EndpointOut:
        """The same as PATCH."""
        return await saved(user, await services.endpoints.update(user, endpoint_id, body))

    @endpoints.delete("/{endpoint_id}", status_code=204, responses=NOT_FOUND)
    async def delete_endpoint(endpoint_id: str, user: UserDep) -> Response:
        """Stops its workers and removes it with its jobs and logs, permanently."""
        await services.endpoints.delete(user, endpoint_id)
        return Response(status_code=204)

    @endpoints.get(
        "/{endpoint_id}/logs",
        response_model=LogsOut,
        responses={**BAD, **NOT_FOUND, **FOLLOWED},
    )
    async def endpoint_logs(
        request: Request,
        endpoint_id: str,
        user: UserDep,
        worker: Annotated[
            str | None, Query(description="Only this worker's lines (its id)")
        ] = None,
        since: Since = None,
        tail: Tail = 1000,
        follow: Annotated[
            bool,
            Query(
                description="Keep the response open and send new lines as they are written, as "
                "`application/x-ndjson`: the last `tail` lines first, then one JSON object per "
                "new line (an empty line now and then while there are none). It ends when the "
                "client disconnects or the endpoint is deleted."
            ),
        ] = False,
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
        if not follow:
            lines = await services.logs.lines(
                endpoint_id, worker, since_ts, tail, local_only=local_only, credentials=auth
            )
            return json_response({"lines": [log_line(line) for line in lines]})
        followed = await services.logs.follow(
            endpoint_id, worker, since_ts, tail, local_only=local_only, credentials=auth
        )
        return ndjson_stream(followed)

    # -- network volumes ----------------------------------------------------------------
    volumes = APIRouter(prefix="/networkvolumes", tags=["network volumes"])

    @volumes.post("", response_model=NetworkVolumeOut, responses=BAD)
    async def create_network_volume(body: NetworkVolumeCreate, user: UserDep) -> NetworkVolumeOut:
        """Create a volume: a directory on the server, mounted read-write at `/runpod-volume`
        in every worker of the endpoints that name it in `networkVolumeId`. Refused (400,
        `size`) when the disk has less free space than `size`."""
        return _volume_out(await services.volumes.create(user, body))

    @volumes.get("", response_model=list[NetworkVolumeOut])
    async def list_network_volumes(user: UserDep) -> list[NetworkVolumeOut]:
        return [_volume_out(r) for r in await services.volumes.all(user)]

    @volumes.get("/{volume_id}", response_model=NetworkVolumeOut, responses=NOT_FOUND)
    async def get_network_volume(volume_id: str, user: UserDep) -> NetworkVolumeOut:
        return _volume_out(await services.volumes.get(user, volume_id))

    @volumes.patch("/{volume_id}", response_model=NetworkVolumeOut, responses={**BAD, **NOT_FOUND})
    async def update_network_volume(
        volume_id: str, body: NetworkVolumeUpdate, user: UserDep
    ) -> NetworkVolumeOut:
        """Rename, grow, or both. A volume never shrinks (400, `size`), and what it grows by
        must fit in the disk's free space (400, `size`). Its workers see the new size at once:
        nothing restarts."""
        return _volume_out(await services.volumes.update(user, volume_id, body))

    @volumes.post(
        "/{volume_id}/update", response_model=NetworkVolumeOut, responses={**BAD, **NOT_FOUND}
    )
    async def update_network_volume_post(
        volume_id: str, body: NetworkVolumeUpdate, user: UserDep
    ) -> NetworkVolumeOut:
        """The same as PATCH."""
        return _volume_out(await services.volumes.update(user, volume_id, body))

    @volumes.delete(
        "/{volume_id}",
        status_code=204,
        responses={
            **NOT_FOUND,
            409: {"description": "In use by endpoints or pods, which the message names"},
        },
    )
    async def delete_network_volume(volume_id: str, user: UserDep) -> Response:
        """Delete the volume and every file in it, permanently. Refused (409) while endpoints
        or pods (not ones being deleted) name it in `networkVolumeId`: the message lists
        them."""
        await services.volumes.delete(user, volume_id)
        return Response(status_code=204)

    # -- webhook signing secret ---------------------------------------------------------
    webhooks = APIRouter(prefix="/webhooksecret", tags=["webhooks"])

    @webhooks.get("", response_model=WebhookSecretOut)
    async def get_webhook_secret(user: UserDep) -> WebhookSecretOut:
        """Your webhook signing secret, made on first use.

        Every job webhook of your endpoints is signed the Standard Webhooks way
        (https://www.standardwebhooks.com): headers `webhook-id` (the delivery id, the same on
        every attempt: deduplicate on it), `webhook-timestamp` (Unix seconds) and
        `webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`. A receiver
        verifies the raw body with any Standard Webhooks library, e.g. in Python
        `standardwebhooks.Webhook(secret).verify(body, headers)`, and answers 200; any other
        answer is tried again, 3 attempts in all, 10 s apart."""
        return WebhookSecretOut(secret=await services.webhooks.secret(user.id))

    @webhooks.post("/rotate", response_model=WebhookSecretOut)
    async def rotate_webhook_secret(user: UserDep) -> WebhookSecretOut:
        """Replace your webhook signing secret; the old one stops working at once.

        Every attempt from now on is signed with the new secret, retries of deliveries made
        before included, so update your receivers with it (verify as described under
        `GET /webhooksecret`)."""
        return WebhookSecretOut(secret=await services.webhooks.rotate_secret(user.id))

    app.include_router(registry_auths.router(services, current_user))
    app.include_router(templates.router(services, current_user))
    for router in (endpoints, volumes, webhooks):
        app.include_router(router)
    app.include_router(pods.router(services, current_user))
    app.include_router(billing.router(services, current_user))
    app.include_router(models.router(services, current_user))
    return app
