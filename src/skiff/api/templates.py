"""``/v1/templates``: what an endpoint's or a pod's workers run (create, list, get, update by
PATCH or POST .../update, delete)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from starlette.responses import Response

from skiff.api.documented_errors import BAD, IN_USE, NAME_TAKEN, NOT_FOUND
from skiff.api.needs import needs
from skiff.api.updates import patch_or_post_update
from skiff.domain.permissions import READ, WRITE
from skiff.domain.templates import Template, TemplateCreate, TemplateUpdate
from skiff.domain.users import User
from skiff.services.hub import Services


def router(services: Services, user_dep: Any) -> APIRouter:
    templates = APIRouter(prefix="/templates", tags=["templates"])
    UserDep = Annotated[User, Depends(user_dep)]

    @templates.post("", response_model=Template, responses={**BAD, **NAME_TAKEN})
    @needs(WRITE)
    async def create_template(body: TemplateCreate, user: UserDep) -> Template:
        """The local provider runs `dockerEntrypoint + dockerStartCmd` as a process."""
        return await services.templates.create(user, body)

    @templates.get("", response_model=list[Template])
    @needs(READ)
    async def list_templates(user: UserDep) -> list[Template]:
        return await services.templates.all(user)

    @templates.get("/{template_id}", response_model=Template, responses=NOT_FOUND)
    @needs(READ)
    async def get_template(template_id: str, user: UserDep) -> Template:
        return await services.templates.get(user, template_id)

    @patch_or_post_update(
        templates, "/{template_id}", response_model=Template, responses={**BAD, **NOT_FOUND}
    )
    @needs(WRITE)
    async def update_template(template_id: str, body: TemplateUpdate, user: UserDep) -> Template:
        """Changing what the template runs rolls the workers of the endpoints using it."""
        return await services.templates.update(user, template_id, body)

    @templates.delete("/{template_id}", status_code=204, responses={**NOT_FOUND, **IN_USE})
    @needs(WRITE)
    async def delete_template(template_id: str, user: UserDep) -> Response:
        await services.templates.delete(user, template_id)
        return Response(status_code=204)

    return templates
