"""``/v1/containerregistryauth``: credentials for private container registries (create, list,
get, delete); the password is never returned."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from starlette.responses import Response

from skiff.api.documented_errors import BAD, BAD_ID, IN_USE, NAME_TAKEN, NOT_FOUND
from skiff.api.needs import needs
from skiff.domain.permissions import READ, WRITE
from skiff.domain.registry_auths import RegistryAuth, RegistryAuthCreate
from skiff.domain.users import User
from skiff.services.hub import Services


def router(services: Services, user_dep: Any) -> APIRouter:
    auths = APIRouter(prefix="/containerregistryauth", tags=["container registry auths"])
    UserDep = Annotated[User, Depends(user_dep)]

    @auths.post("", response_model=RegistryAuth, responses={**BAD, **NAME_TAKEN})
    @needs(WRITE)
    async def create_registry_auth(body: RegistryAuthCreate, user: UserDep) -> RegistryAuth:
        """Store credentials for a private registry. The password is never returned."""
        return await services.registry_auths.create(user, body)

    @auths.get("", response_model=list[RegistryAuth])
    @needs(READ)
    async def list_registry_auths(user: UserDep) -> list[RegistryAuth]:
        return await services.registry_auths.all(user)

    @auths.get("/{auth_id}", response_model=RegistryAuth, responses={**BAD_ID, **NOT_FOUND})
    @needs(READ)
    async def get_registry_auth(auth_id: str, user: UserDep) -> RegistryAuth:
        """An id that cannot be one (not lowercase letters and digits, e.g. the auth's name) is
        a 400 "invalid ID supplied", as the specification has it; an unknown one a 404."""
        return await services.registry_auths.get(user, auth_id)

    @auths.delete(
        "/{auth_id}",
        status_code=204,
        responses={**BAD_ID, **NOT_FOUND, **IN_USE},
    )
    @needs(WRITE)
    async def delete_registry_auth(auth_id: str, user: UserDep) -> Response:
        await services.registry_auths.delete(user, auth_id)
        return Response(status_code=204)

    return auths
