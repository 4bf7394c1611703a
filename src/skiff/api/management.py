"""``/v1``: the management REST interface (registry auths, templates, endpoints, network
volumes, the webhook signing secret)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, Field

from skiff.api import (
    billing,
    credentials,
    endpoints,
    errors,
    models,
    pods,
    registry_auths,
    templates,
    volumes,
)
from skiff.api.openapi3 import document_errors, downgrade_to_3_0
from skiff.api.responses import NO_TELEMETRY
from skiff.body_gate import BodyGate
from skiff.domain.users import User
from skiff.services.hub import Services


class WebhookSecretOut(BaseModel):
    secret: str = Field(
        description="Standard Webhooks signing secret: `whsec_` + base64 of 32 random bytes"
    )


#: The largest request body ``/v1`` takes (a template with a long readme and env fits easily).
BODY_LIMIT = 1024 * 1024
#: The scope key under which ``BodyGate`` leaves the caller it checked before the body.
USER = "skiff.user"


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
    app.include_router(volumes.router(services, current_user))
    for router in (webhooks,):
        app.include_router(router)
    app.include_router(pods.router(services, current_user))
    app.include_router(billing.router(services, current_user))
    app.include_router(models.router(services, current_user))
    return app
