"""Container registry credentials, per owner."""

from __future__ import annotations

from skiff.clock import Clock
from skiff.domain.quotas import Owned
from skiff.domain.registry_auths import (
    RegistryAuth,
    RegistryAuthCreate,
    RegistryAuthCredentials,
    invalid_id,
)
from skiff.domain.users import User
from skiff.errors import Conflict, Invalid, NotFound
from skiff.ids import short_id
from skiff.services.quotas import Quotas
from skiff.store.base import RegistryAuthRecord, Store


def _public(record: RegistryAuthRecord) -> RegistryAuth:
    return RegistryAuth(id=record.id, name=record.name)


def _check_id(auth_id: str) -> None:
    why = invalid_id(auth_id)
    if why is not None:
        raise Invalid(why, field="id")


class RegistryAuths:
    def __init__(self, store: Store, clock: Clock, quotas: Quotas | None = None) -> None:
        self._quotas = quotas or Quotas(store, 0)
        self._store = store
        self._clock = clock

    async def create(self, user: User, data: RegistryAuthCreate) -> RegistryAuth:
        await self._quotas.make_room(user, Owned.REGISTRY_AUTHS)
        record = RegistryAuthRecord(
            id=short_id(),
            user_id=user.id,
            name=data.name,
            username=data.username,
            password=data.password,
            created_at=self._clock.now(),
        )
        return _public(await self._store.create_registry_auth(record))

    async def all(self, user: User) -> list[RegistryAuth]:
        return [_public(r) for r in await self._store.list_registry_auths(user.id)]

    async def get(self, user: User, auth_id: str) -> RegistryAuth:
        _check_id(auth_id)
        record = await self._store.get_registry_auth(user.id, auth_id)
        if record is None:
            raise NotFound("container registry auth not found")
        return _public(record)

    async def update_credentials(
        self, user: User, auth_id: str, data: RegistryAuthCredentials
    ) -> RegistryAuth:
        """New username and password under the same name; the next pull uses them."""
        _check_id(auth_id)
        if not await self._store.update_registry_auth_credentials(
            user.id, auth_id, data.username, data.password
        ):
            raise NotFound("container registry auth not found")
        return await self.get(user, auth_id)

    async def delete(self, user: User, auth_id: str) -> None:
        await self.get(user, auth_id)
        users = [
            t.id
            for t in await self._store.list_templates(user.id)
            if t.containerRegistryAuthId == auth_id
        ]
        if users:
            raise Conflict(
                f"container registry auth {auth_id} is used by template(s) {', '.join(users)}"
            )
        await self._store.delete_registry_auth(user.id, auth_id)
