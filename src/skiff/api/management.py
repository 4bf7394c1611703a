"""``/v1``: the management REST interface (registry auths, templates, endpoints, network
volumes, the webhook signing secret)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, Field
from starlette.responses import Response

from skiff.api import (
    billing,
    credentials,
    endpoints,
    errors,
    models,
    pods,
    registry_auths,
    templates,
)
from skiff.api.openapi3 import document_errors, downgrade_to_3_0
from skiff.api.responses import NO_TELEMETRY
from skiff.body_gate import BodyGate
from skiff.domain import times
from skiff.domain.users import User
from skiff.domain.volumes import NetworkVolumeCreate, NetworkVolumeUpdate, VolumeReport
from skiff.services.hub import Services


class WebhookSecretOut(BaseModel):
    secret: str = Field(
        description="Standard Webhooks signing secret: `whsec_` + base64 of 32 random bytes"
    )


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
    app.include_router(endpoints.router(services, current_user))
    for router in (volumes, webhooks):
        app.include_router(router)
    app.include_router(pods.router(services, current_user))
    app.include_router(billing.router(services, current_user))
    app.include_router(models.router(services, current_user))
    return app
