"""``/v1/models``: public model endpoints. Every user lists them; an administrator publishes
one of their queue-based endpoints under a model id, which every user then calls as
``/v2/{modelId}/run`` (and ``/runsync``, ``/status``, ``/stream``, ``/cancel``, ``/retry``,
``/health``, the OpenAI-compatible routes) with the usual bodies, seeing only their own jobs."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field
from starlette.responses import Response

from skiff.api.needs import needs
from skiff.domain import times
from skiff.domain.permissions import READ, WRITE
from skiff.domain.public_models import PublicModel, PublishInput
from skiff.domain.users import User
from skiff.services.hub import Services


class PublicModelOut(BaseModel):
    modelId: str = Field(description="Stands where an endpoint id does: /v2/{modelId}/run")
    description: str
    jobUrl: str = Field(description="Where to send jobs, below the server's address")
    createdAt: str


class PublishedModelOut(PublicModelOut):
    """What the administrator who publishes it sees: which endpoint runs it."""

    endpointId: str


def model_out(model: PublicModel) -> PublicModelOut:
    return PublicModelOut(
        modelId=model.model_id,
        description=model.description,
        jobUrl=f"/v2/{model.model_id}/run",
        createdAt=times.iso(model.created_at),
    )


FORBIDDEN: dict[int | str, dict[str, Any]] = {403: {"description": "Not an administrator"}}
BAD: dict[int | str, dict[str, Any]] = {
    400: {"description": "A field is invalid; `field` names it"}
}
TAKEN: dict[int | str, dict[str, Any]] = {
    409: {"description": "The model id, or the endpoint, is published already"}
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such model"}}


def router(services: Services, user_dep: Any) -> APIRouter:
    models = APIRouter(prefix="/models", tags=["public models"])
    UserDep = Annotated[User, Depends(user_dep)]

    @models.get("", response_model=list[PublicModelOut])
    @needs(READ)
    async def list_models(user: UserDep) -> list[PublicModelOut]:
        """Every published model, for every user with a key."""
        return [model_out(m) for m in await services.public_models.all()]

    @models.get("/{model_id}", response_model=PublicModelOut, responses=NOT_FOUND)
    @needs(READ)
    async def get_model(model_id: str, user: UserDep) -> PublicModelOut:
        return model_out(await services.public_models.get(model_id))

    @models.post(
        "",
        status_code=201,
        response_model=PublishedModelOut,
        responses={**BAD, **FORBIDDEN, **TAKEN},
    )
    @needs(WRITE)
    async def publish_model(data: PublishInput, user: UserDep) -> PublishedModelOut:
        """Administrators: publish one of your queue-based endpoints under `modelId`. Its
        callers' jobs are theirs alone (each sees, streams, cancels and retries only their own;
        `/requests` and `/purge-queue` stay yours), their rate limits are their own, and each
        job's run time is billed to its caller under the model id."""
        model = await services.public_models.publish(user, data)
        return PublishedModelOut(**model_out(model).model_dump(), endpointId=model.endpoint_id)

    @models.delete("/{model_id}", status_code=204, responses={**FORBIDDEN, **NOT_FOUND})
    @needs(WRITE)
    async def unpublish_model(model_id: str, user: UserDep) -> Response:
        """Administrators: withdraw a model; its endpoint stays, reachable by its owner only."""
        await services.public_models.unpublish(user, model_id)
        return Response(status_code=204)

    return models
