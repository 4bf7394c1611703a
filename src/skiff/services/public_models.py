"""Public model endpoints: published by an administrator, listed to everyone, resolved on
every job call that names a model id instead of an endpoint id (``Endpoints.for_jobs``)."""

from __future__ import annotations

from cachetools import TTLCache

from skiff.clock import Clock
from skiff.domain.endpoints import EndpointType
from skiff.domain.flash import FLASH_NOT_PUBLIC, flash_worker_of
from skiff.domain.public_models import PublicModel, PublishInput
from skiff.domain.users import User
from skiff.errors import Conflict, Forbidden, Invalid, NotFound
from skiff.store.base import Store

#: How long a model id's resolution is reused by the job routes (a change through this
#: replica is seen at once).
RECENT_SECONDS = 1.0


class PublicModels:
    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._recent: TTLCache[str, PublicModel | None, float] = TTLCache(
            maxsize=10_000, ttl=RECENT_SECONDS, timer=clock.now
        )

    async def all(self) -> list[PublicModel]:
        """Every published model: readable by every user."""
        return await self._store.public_models()

    async def get(self, model_id: str) -> PublicModel:
        model = await self.resolve(model_id)
        if model is None:
            raise NotFound(f"model {model_id} not found")
        return model

    async def resolve(self, model_id: str) -> PublicModel | None:
        """The model published under this id, from a reading at most ``RECENT_SECONDS`` old."""
        try:  # None is cached too: a call naming an unknown id costs one read a second
            return self._recent[model_id]
        except KeyError:
            pass
        model = await self._store.public_model(model_id)
        self._recent[model_id] = model
        return model

    async def publish(self, user: User, data: PublishInput) -> PublicModel:
        _admin(user)
        endpoint = await self._store.get_endpoint(data.endpointId)
        if endpoint is None or endpoint.userId != user.id:
            raise Invalid(f"endpointId: no endpoint {data.endpointId}", field="endpointId")
        if endpoint.spec.type is not EndpointType.QB:
            raise Invalid(
                "endpointId: only a queue-based endpoint is published (its callers use "
                "/v2/{modelId}/run and the rest)",
                field="endpointId",
            )
        template = await self._store.get_template(user.id, endpoint.spec.templateId)
        if template is not None and flash_worker_of(template) is not None:
            raise Invalid(f"endpointId: {FLASH_NOT_PUBLIC}", field="endpointId")
        if await self._store.get_endpoint(data.modelId) is not None:
            raise Conflict(f"modelId {data.modelId} is an endpoint's id: choose another")
        model = PublicModel(
            model_id=data.modelId,
            endpoint_id=endpoint.id,
            description=data.description,
            published_by=user.id,
            created_at=self._clock.now(),
        )
        if not await self._store.publish_model(model):
            taken = await self._store.public_model(data.modelId)
            if taken is not None:
                raise Conflict(f"model {data.modelId} is published already")
            raise Conflict(f"endpoint {endpoint.id} is published already under another model id")
        self._recent.pop(model.model_id, None)
        return model

    async def unpublish(self, user: User, model_id: str) -> None:
        _admin(user)
        if not await self._store.unpublish_model(model_id):
            raise NotFound(f"model {model_id} not found")
        self._recent.pop(model_id, None)


def _admin(user: User) -> None:
    if not user.is_admin:
        raise Forbidden("only an administrator publishes or withdraws public models")
