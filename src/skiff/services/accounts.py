"""Keys users make themselves, and the administrator's users: made, listed, revoked, disabled.

A user sees and revokes only their own keys (another user's key id is as unknown as a made-up
one); a key makes no key with more rights than itself. A disabled user's keys and console
sessions are refused (``Auth.caller_of_digest``), and so are their workers' calls; the leader's
loops, woken here, stop what runs of theirs: the scaler their endpoints' workers (none starts
while they are disabled), the pod runner their pods (stopped as their own stop would, and left
stopped). Nothing of theirs is deleted: enabling them lets the scaler start workers again as
their endpoints ask; their pods wait for them to start them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from skiff.clock import Clock
from skiff.domain import keys
from skiff.domain.permissions import Caller, Kind, Permissions
from skiff.domain.quotas import Owned
from skiff.domain.users import User
from skiff.errors import Conflict, Forbidden, Invalid, NotFound
from skiff.ids import short_id
from skiff.services.auth import Auth, IssuedKey
from skiff.services.quotas import Quotas
from skiff.services.wakeups import Wake, Wakeups
from skiff.store.base import ApiKey, Store

#: A key's name: shown in lists to tell keys apart.
MAX_KEY_NAME = 100
_USER_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


@dataclass(frozen=True, slots=True)
class KeyRequest:
    name: str
    permissions: Permissions


class Accounts:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        auth: Auth,
        wakeups: Wakeups,
        quotas: Quotas | None = None,
    ) -> None:
        self._quotas = quotas or Quotas(store, 0)
        self._store = store
        self._clock = clock
        self._auth = auth
        self._wakeups = wakeups

    # -- keys ----------------------------------------------------------------------------
    async def create_key(self, caller: Caller, wanted: KeyRequest) -> IssuedKey:
        """A new key of the caller's user, returned once with its secret."""
        await self._quotas.make_room(caller.user, Owned.API_KEYS)
        name = wanted.name.strip()
        if not name or len(name) > MAX_KEY_NAME:
            raise Invalid(f"name: 1 to {MAX_KEY_NAME} characters", field="name")
        if not caller.permissions.covers(wanted.permissions):
            raise Invalid(
                f"permissions: a key with permissions {caller.permissions.kind} cannot make a "
                "key with more rights than its own",
                field="permissions",
            )
        if wanted.permissions.kind is Kind.RESTRICTED:
            for endpoint_id in wanted.permissions.endpoints:
                endpoint = await self._store.get_endpoint(endpoint_id)
                if endpoint is None or endpoint.userId != caller.user.id:
                    raise Invalid(f"endpoints: no endpoint {endpoint_id}", field="endpoints")
        return await self._auth.register_key(
            keys.new_api_key(), caller.user, name, wanted.permissions
        )

    async def keys_of(self, user: User) -> list[ApiKey]:
        return await self._store.list_user_api_keys(user.id)

    async def revoke_key(self, user: User, key_id: str) -> None:
        """Revoked at once in the database and on this server; every other server refuses it
        within the key cache time."""
        if not await self._store.revoke_user_api_key(user.id, key_id, self._clock.now()):
            mine = {k.id: k for k in await self._store.list_user_api_keys(user.id)}
            if key_id in mine:
                raise Conflict(f"API key {key_id} is revoked already")
            raise NotFound(f"no API key {key_id}")
        self._auth.forget(key_id=key_id)

    # -- users (the administrator's) -------------------------------------------------------
    @staticmethod
    def _admin_only(user: User) -> None:
        if not user.is_admin:
            raise Forbidden("only an administrator manages users")

    async def users(self, admin: User) -> list[User]:
        self._admin_only(admin)
        return await self._store.list_users()

    async def create_user(self, admin: User, name: str) -> IssuedKey:
        """A new user and their first key (all permissions), shown once to give them."""
        self._admin_only(admin)
        name = name.strip()
        if not _USER_NAME.fullmatch(name):
            raise Invalid(
                "name: lowercase letters, digits, '.', '_' or '-', starting with a letter or "
                "digit, at most 63 characters",
                field="name",
            )
        user = await self._store.create_user(
            User(id=short_id(), name=name, is_admin=False, created_at=self._clock.now())
        )
        return await self._auth.register_key(keys.new_api_key(), user, "first key")

    async def set_disabled(self, admin: User, user_id: str, disabled: bool) -> User:
        self._admin_only(admin)
        if disabled and user_id == admin.id:
            raise Invalid("an administrator cannot disable themselves", field="userId")
        when = self._clock.now() if disabled else None
        if not await self._store.set_user_disabled(user_id, when):
            raise NotFound(f"no user {user_id}")
        self._auth.forget(user_id=user_id)
        # Whichever replica leads (the wake-ups reach it) reads who is disabled from the store
        # at its next pass: the scaler stops or starts the user's workers, the pod runner
        # stops their pods.
        self._wakeups.notify(Wake.SCALER)
        self._wakeups.notify(Wake.PODS)
        user = await self._store.get_user(user_id)
        assert user is not None  # just updated
        return user
