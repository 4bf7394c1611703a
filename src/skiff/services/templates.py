"""Templates, per owner. Changing what a template runs rolls the workers of its endpoints."""

from __future__ import annotations

from skiff.clock import Clock
from skiff.domain.quotas import Owned
from skiff.domain.templates import (
    TEMPLATE_FIELDS_THAT_ROLL_WORKERS,
    Template,
    TemplateCreate,
    TemplateUpdate,
    apply_template_update,
)
from skiff.domain.users import User
from skiff.errors import Conflict, Invalid, NotFound
from skiff.ids import short_id
from skiff.services.quotas import Quotas
from skiff.services.secrets import check_references
from skiff.services.wakeups import Wake, Wakeups
from skiff.store.base import Store


class Templates:
    def __init__(
        self, store: Store, clock: Clock, wakeups: Wakeups, quotas: Quotas | None = None
    ) -> None:
        self._quotas = quotas or Quotas(store, 0)
        self._store = store
        self._clock = clock
        self._wakeups = wakeups

    async def _check_registry_auth(self, user: User, auth_id: str | None) -> None:
        if auth_id is not None and await self._store.get_registry_auth(user.id, auth_id) is None:
            raise Invalid(
                f"containerRegistryAuthId: no container registry auth {auth_id}",
                field="containerRegistryAuthId",
            )

    async def create(self, user: User, data: TemplateCreate) -> Template:
        await self._quotas.make_room(user, Owned.TEMPLATES)
        await self._check_registry_auth(user, data.containerRegistryAuthId)
        await check_references(self._store, user, data.env, "env")
        template = Template(id=short_id(), **data.model_dump())
        return await self._store.create_template(user.id, template, self._clock.now())

    async def all(self, user: User) -> list[Template]:
        return await self._store.list_templates(user.id)

    async def get(self, user: User, template_id: str) -> Template:
        template = await self._store.get_template(user.id, template_id)
        if template is None:
            raise NotFound("template not found")
        return template

    async def update(self, user: User, template_id: str, data: TemplateUpdate) -> Template:
        current = await self.get(user, template_id)
        if "containerRegistryAuthId" in data.model_fields_set:
            await self._check_registry_auth(user, data.containerRegistryAuthId)
        updated = apply_template_update(current, data)
        await check_references(self._store, user, updated.env, "env")
        await self._store.update_template(user.id, updated)
        rolls = any(
            getattr(current, f) != getattr(updated, f) for f in TEMPLATE_FIELDS_THAT_ROLL_WORKERS
        )
        if rolls and await self._store.bump_endpoint_versions(template_id):
            self._wakeups.notify(Wake.SCALER)
        return updated

    async def delete(self, user: User, template_id: str) -> None:
        await self.get(user, template_id)
        users = await self._store.endpoints_using_template(template_id)
        if users:
            raise Conflict(f"template {template_id} is used by endpoint(s) {', '.join(users)}")
        await self._store.delete_template(user.id, template_id)
