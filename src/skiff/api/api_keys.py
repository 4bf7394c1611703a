"""``/v1/apikeys``: keys a user makes for themselves (create, shown once; list, without
secrets; revoke). A user sees and revokes only their own keys; another user's key id answers
404 as an unknown one does."""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field
from starlette.responses import Response

from skiff.api.documented_errors import BAD, NOT_FOUND
from skiff.api.needs import needs
from skiff.domain import permissions
from skiff.domain.input_types import StrictInput, Text
from skiff.domain.keys import ApiKey
from skiff.domain.permissions import READ, WRITE, Caller
from skiff.services.accounts import KeyRequest
from skiff.services.hub import Services

PermissionKind = Literal["all", "read", "restricted"]
EndpointAccess = Literal["read", "read_write"]


class ApiKeyCreate(StrictInput):
    name: Text = Field(min_length=1, max_length=100, description="Shown in lists")
    permissions: PermissionKind = Field(
        description="`all`: read and write; `read`: read-only everywhere; `restricted`: only "
        "the endpoints of `endpoints`, nothing else (no /v1 account routes, no GraphQL)"
    )
    endpoints: dict[str, EndpointAccess] | None = Field(
        default=None,
        description='A restricted key\'s endpoints: `{"<endpoint id>": "read" | "read_write"}`',
    )


class ApiKeyOut(BaseModel):
    id: str
    name: str
    permissions: PermissionKind
    endpoints: dict[str, EndpointAccess]
    hint: str = Field(description="The key's first and last characters, to tell keys apart")
    createdAt: float
    revokedAt: float | None


class ApiKeyCreated(ApiKeyOut):
    key: str = Field(description="The key itself: shown this once, never again")


def _out(record: ApiKey) -> dict[str, Any]:
    return {
        "id": record.id,
        "name": record.label,
        "permissions": str(record.permissions.kind),
        "endpoints": record.permissions.grants_json(),
        "hint": record.hint,
        "createdAt": record.created_at,
        "revokedAt": record.revoked_at,
    }


def router(services: Services, caller_dep: Any) -> APIRouter:
    keys = APIRouter(prefix="/apikeys", tags=["API keys"])
    CallerDep = Annotated[Caller, Depends(caller_dep)]

    @keys.post("", response_model=ApiKeyCreated, responses=BAD)
    @needs(WRITE)
    async def create_api_key(body: ApiKeyCreate, caller: CallerDep) -> ApiKeyCreated:
        """Make a key for yourself. The answer's `key` is shown this once: keep it. A key
        cannot make a key with more rights than its own; a restricted key's `endpoints` must
        be yours (400 naming the first that is not)."""
        wanted = KeyRequest(body.name, permissions.parse(body.permissions, body.endpoints))
        issued = await services.accounts.create_key(caller, wanted)
        return ApiKeyCreated(**_out(issued.record), key=issued.key)

    @keys.get("", response_model=list[ApiKeyOut])
    @needs(READ)
    async def list_api_keys(caller: CallerDep) -> list[ApiKeyOut]:
        """Your keys, revoked ones included, oldest first; never their secrets."""
        return [ApiKeyOut(**_out(k)) for k in await services.accounts.keys_of(caller.user)]

    @keys.delete(
        "/{key_id}",
        status_code=204,
        responses={**NOT_FOUND, 409: {"description": "Revoked already"}},
    )
    @needs(WRITE)
    async def revoke_api_key(key_id: str, caller: CallerDep) -> Response:
        """Revoke one of your keys: refused everywhere within the server's key cache time
        (`SKIFF_KEY_CACHE_SECONDS`), and console sessions made with it end at once."""
        await services.accounts.revoke_key(caller.user, key_id)
        return Response(status_code=204)

    return keys
