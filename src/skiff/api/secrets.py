"""``/v1/secrets``: the caller's secrets (create, list, get, change the value, delete). A
template's or pod's ``env`` refers to one as ``{{ RUNPOD_SECRET_<name> }}``; its value is never
returned, only put into the environment of the owner's workers and pods."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field
from starlette.responses import Response

from skiff.api.documented_errors import BAD, BAD_ID, NAME_TAKEN, NOT_FOUND
from skiff.api.needs import needs
from skiff.domain import times
from skiff.domain.permissions import READ, WRITE
from skiff.domain.secrets import Secret, SecretCreate, SecretValue
from skiff.domain.users import User
from skiff.services.hub import Services


class SecretOut(BaseModel):
    """A secret as it is shown: its name and dates, never its value."""

    id: str
    name: str = Field(description="Referred to as `{{ RUNPOD_SECRET_<name> }}` in an `env`")
    createdAt: str
    updatedAt: str = Field(description="When its value last changed")


def _out(secret: Secret) -> SecretOut:
    return SecretOut(
        id=secret.id,
        name=secret.name,
        createdAt=times.iso(secret.created_at),
        updatedAt=times.iso(secret.updated_at),
    )


def router(services: Services, user_dep: Any) -> APIRouter:
    secrets = APIRouter(prefix="/secrets", tags=["secrets"])
    UserDep = Annotated[User, Depends(user_dep)]

    @secrets.post("", response_model=SecretOut, responses={**BAD, **NAME_TAKEN})
    @needs(WRITE)
    async def create_secret(body: SecretCreate, user: UserDep) -> SecretOut:
        """Store a secret, encrypted. Its value is never returned: a template's or pod's `env`
        value `{{ RUNPOD_SECRET_<name> }}` (spaces inside the braces optional, other text
        around it kept) is replaced by it in the environment of your workers and pods when
        they start."""
        return _out(await services.secrets.create(user, body))

    @secrets.get("", response_model=list[SecretOut])
    @needs(READ)
    async def list_secrets(user: UserDep) -> list[SecretOut]:
        """Your secrets by name, with their dates; never their values."""
        return [_out(s) for s in await services.secrets.all(user)]

    @secrets.get("/{secret_id}", response_model=SecretOut, responses={**BAD_ID, **NOT_FOUND})
    @needs(READ)
    async def get_secret(secret_id: str, user: UserDep) -> SecretOut:
        return _out(await services.secrets.get(user, secret_id))

    @secrets.patch(
        "/{secret_id}", response_model=SecretOut, responses={**BAD, **BAD_ID, **NOT_FOUND}
    )
    @needs(WRITE)
    async def update_secret(secret_id: str, body: SecretValue, user: UserDep) -> SecretOut:
        """Change a secret's value. The workers of endpoints that refer to it are replaced,
        as after a template change: a running worker keeps the value it started with until
        its successor, which has the new one, takes over. Running pods keep theirs until they
        restart."""
        return _out(await services.secrets.update(user, secret_id, body))

    @secrets.delete(
        "/{secret_id}",
        status_code=204,
        responses={
            **BAD_ID,
            **NOT_FOUND,
            409: {"description": "A template, endpoint or pod refers to it"},
        },
    )
    @needs(WRITE)
    async def delete_secret(secret_id: str, user: UserDep) -> Response:
        await services.secrets.delete(user, secret_id)
        return Response(status_code=204)

    return secrets
