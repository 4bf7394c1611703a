"""``/v1``: the management REST interface, put together: its OpenAPI description, error bodies,
the key and body-size check before a body is read, and the routers of its resources, one module
each (registry auths, templates, endpoints, network volumes, the webhook signing secret, pods,
billing, public models, secrets, the caller's own account)."""

from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline

from skiff.api import (
    api_keys,
    billing,
    credentials,
    endpoints,
    errors,
    logs,
    models,
    pods,
    registry_auths,
    secrets,
    templates,
    user,
    volumes,
    webhooks,
    worker_logs,
)
from skiff.api.needs import api_routes, need_of, needs
from skiff.api.openapi3 import document_errors, downgrade_to_3_0
from skiff.api.responses import NO_TELEMETRY
from skiff.body_gate import BodyGate
from skiff.domain.permissions import Caller, Need, NoKey
from skiff.domain.users import User
from skiff.errors import Unauthorized
from skiff.services.hub import Services

#: The largest request body ``/v1`` takes (a template with a long readme and env fits easily).
BODY_LIMIT = 1024 * 1024
DOCUMENTATION = NoKey("the interactive documentation, for anyone")
#: The scope key under which ``BodyGate`` leaves the caller whose key it checked before the body
#: (the route's ``Need`` is checked once routed, by ``current_caller``).
CALLER = "skiff.caller"


def build(services: Services) -> FastAPI:
    async def current_caller(request: Request) -> Caller:
        """The caller, once its key is checked against the route's declared ``Need``."""
        caller: Caller | None = request.scope.get(CALLER)
        if caller is None:  # no body: the gate let it through unchecked
            key = credentials.api_key(request.headers.get("authorization"))
            caller = await services.auth.caller(key)
        need = need_of(request.scope.get("endpoint"))
        if not isinstance(need, Need):  # every route declares one (checked below, at build)
            raise Unauthorized("this route takes no API key")
        endpoint_id = request.path_params.get(need.endpoint_param) if need.endpoint_param else None
        caller.check(need.access, endpoint_id)
        return caller

    async def current_user(request: Request) -> User:
        return (await current_caller(request)).user

    async def admit(request: Request) -> int:
        key = credentials.api_key(request.headers.get("authorization"))
        request.scope[CALLER] = await services.auth.caller(key)
        return BODY_LIMIT

    app = FastAPIOffline(
        title="skiff management API",
        telemetry=NO_TELEMETRY,
        version="0.1.0",
        description=(
            "Management REST interface of skiff: container registry auths, templates, "
            "serverless endpoints (queue-based, or load balancing with `type: LB`: their "
            "requests go to `/lb/{endpointId}/...`, passed to the workers' own HTTP servers), "
            "network volumes, pods, billing, public models, secrets, your account's settings, "
            "API keys and the webhook signing secret. "
            "Authenticate with `Authorization: Bearer <API key>`; a key's permissions "
            "(`all`, `read`, or `restricted` to some endpoints) decide which routes it reaches, "
            "and a key lacking one gets a 401 naming it. "
            'Errors are `{"message": ...}`. Another user\'s ids answer 404.'
        ),
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
        responses={
            401: {
                "description": "Missing, invalid or revoked API key, or one lacking the "
                "permission the route needs (the message names it)"
            }
        },
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
            documented = document_errors(schema, "message", ("400", "401", "404", "409", "413"))
            app.openapi_schema = downgrade_to_3_0(_say_permissions(documented, app))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    # One router module per resource; the API keys' answers depend on the key that calls.
    for resource in (
        registry_auths,
        templates,
        endpoints,
        volumes,
        webhooks,
        pods,
        logs,
        billing,
        models,
        secrets,
        user,
        worker_logs,
    ):
        app.include_router(resource.router(services, current_user))
    app.include_router(api_keys.router(services, current_caller))
    for route in app.routes:  # the interactive documentation is for anyone, as /openapi.json
        if isinstance(route, APIRoute) and route.path.startswith("/docs"):
            needs(DOCUMENTATION)(route.endpoint)
    undeclared = [f"{sorted(r.methods)} {r.path}" for r in api_routes(app.routes) if r.need is None]
    if undeclared:  # a route reached by any key unchecked would be a hole: refuse to start
        raise RuntimeError(f"/v1 routes without a declared permission (@needs): {undeclared}")
    return app


def _say_permissions(schema: dict[str, Any], app: FastAPI) -> dict[str, Any]:
    """Each operation's 401 says which permission its key needs (``@needs``)."""
    for route in api_routes(app.routes):
        if not isinstance(route.need, Need):
            continue
        for method in route.methods:
            operation = schema["paths"].get(route.path, {}).get(method.lower())
            if operation is None:
                continue
            need = route.need
            where = f" on the endpoint `{need.endpoint_param}`" if need.endpoint_param else ""
            operation["responses"]["401"]["description"] = (
                f"Missing, invalid or revoked API key, or one without the permission "
                f"`{need.access}`{where} (the message names it)"
            )
    return schema
