"""Users' secrets: kept encrypted by the store, listed by name, put in clear only into the
environment a worker or pod of their owner starts with (``resolved_env``).

A changed secret rolls the workers of the endpoints that refer to it (through their template
or their own ``env``), as a template change does: a running worker keeps the value it started
with, its successor gets the new one. A secret something refers to cannot be deleted.
"""

from __future__ import annotations

from collections.abc import Mapping

from skiff.clock import Clock
from skiff.domain.quotas import Owned
from skiff.domain.secrets import (
    Secret,
    SecretCreate,
    SecretValue,
    invalid_id,
    missing_references,
    references,
    refers_to,
    resolve,
)
from skiff.domain.users import User
from skiff.errors import Conflict, Invalid, NotFound
from skiff.ids import short_id
from skiff.services.quotas import Quotas
from skiff.services.wakeups import Wake, Wakeups
from skiff.store.base import Store


async def resolved_env(store: Store, user_id: str, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with its ``{{ RUNPOD_SECRET_name }}`` references replaced by the owner's
    secrets, for a worker's or pod's start; the store is asked only when there is one."""
    if not references(env):
        return dict(env)
    return resolve(env, await store.user_secret_values(user_id))


async def pod_env(store: Store, user_id: str, env: Mapping[str, str]) -> dict[str, str]:
    """A pod's environment as its owner's account completes it, as on the hosted platform:
    secrets resolved (``resolved_env``), and ``PUBLIC_KEY``, the public SSH key(s) the owner
    set (GraphQL ``updateUserSettings``, ``PATCH /v1/user``, the console), which an image that
    runs sshd reads into ``authorized_keys``; a ``PUBLIC_KEY`` of the pod's own env wins."""
    resolved = await resolved_env(store, user_id, env)
    if "PUBLIC_KEY" not in resolved:
        pub_key = await store.get_pub_key(user_id)
        if pub_key:
            resolved["PUBLIC_KEY"] = pub_key
    return resolved


async def check_references(store: Store, user: User, env: Mapping[str, str], field: str) -> None:
    """400 on ``field`` naming the secrets ``env`` refers to that the user does not have."""
    if references(env):
        names = [s.name for s in await store.list_user_secrets(user.id)]
        missing_references(env, names, field)


def _check_id(secret_id: str) -> None:
    why = invalid_id(secret_id)
    if why is not None:
        raise Invalid(why, field="id")


class Secrets:
    def __init__(
        self, store: Store, clock: Clock, wakeups: Wakeups, quotas: Quotas | None = None
    ) -> None:
        self._quotas = quotas or Quotas(store, 0)
        self._store = store
        self._clock = clock
        self._wakeups = wakeups

    async def create(self, user: User, data: SecretCreate) -> Secret:
        await self._quotas.make_room(user, Owned.SECRETS)
        now = self._clock.now()
        secret = Secret(id=short_id(), name=data.name, created_at=now, updated_at=now)
        # Nothing can refer to it yet: a reference to no such secret is refused at save, and a
        # secret is deleted only once nothing refers to it.
        return await self._store.create_user_secret(user.id, secret, data.value)

    async def all(self, user: User) -> list[Secret]:
        return await self._store.list_user_secrets(user.id)

    async def get(self, user: User, secret_id: str) -> Secret:
        _check_id(secret_id)
        secret = await self._store.get_user_secret(user.id, secret_id)
        if secret is None:
            raise NotFound("secret not found")
        return secret

    async def update(self, user: User, secret_id: str, data: SecretValue) -> Secret:
        _check_id(secret_id)
        updated = await self._store.update_user_secret(
            user.id, secret_id, data.value, self._clock.now()
        )
        if updated is None:
            raise NotFound("secret not found")
        await self._roll(user, updated.name)
        return updated

    async def delete(self, user: User, secret_id: str) -> None:
        secret = await self.get(user, secret_id)
        names = [secret.name]
        store = self._store
        users = [t.id for t in await store.list_templates(user.id) if refers_to(t.env, names)]
        users += [e.id for e in await store.list_endpoints(user.id) if refers_to(e.spec.env, names)]
        users += [p.id for p in await store.list_pods(user.id) if refers_to(p.spec.env, names)]
        if users:
            raise Conflict(
                f"secret {secret.name!r} is used by {', '.join(users)}: remove"
                f" {{{{ RUNPOD_SECRET_{secret.name} }}}} from their env first"
            )
        await self._store.delete_user_secret(user.id, secret_id)

    async def _roll(self, user: User, name: str) -> None:
        """Roll the workers of every endpoint of the user that refers to the secret."""
        templates = {
            t.id for t in await self._store.list_templates(user.id) if refers_to(t.env, [name])
        }
        rolled = False
        for template_id in templates:
            rolled = bool(await self._store.bump_endpoint_versions(template_id)) or rolled
        for endpoint in await self._store.list_endpoints(user.id):
            if endpoint.spec.templateId not in templates and refers_to(endpoint.spec.env, [name]):
                await self._store.update_endpoint(endpoint.id, endpoint.spec, bump_version=True)
                rolled = True
        if rolled:
            self._wakeups.notify(Wake.SCALER)
