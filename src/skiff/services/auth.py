"""Who is calling: API keys for users, derived tokens for workers."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from cachetools import LRUCache, TTLCache

from skiff.clock import Clock
from skiff.domain import keys
from skiff.domain.permissions import ALL, Access, Caller, Permissions
from skiff.domain.users import User
from skiff.errors import Conflict, Unauthorized
from skiff.ids import short_id
from skiff.store.base import ApiKey, Store

ADMIN_USER = "admin"
#: Worker tokens remembered as checked; past this many the least recently used is forgotten.
_CHECKED_TOKENS_MAX = 10_000
#: API keys remembered (by hash) with their user; past this many the oldest go first.
_KEYS_CACHED_MAX = 10_000


@dataclass(frozen=True, slots=True)
class IssuedKey:
    key: str
    record: ApiKey
    user: User


class Auth:
    def __init__(self, store: Store, clock: Clock, cache_seconds: float) -> None:
        self._store = store
        self._clock = clock
        # key hash -> its caller, or None for an unknown or revoked key (or a disabled user's);
        # on the injected clock, so a revoked key stops working within cache_seconds (and tests
        # move that time by hand).
        self._cache: TTLCache[str, Caller | None, float] = TTLCache(
            maxsize=_KEYS_CACHED_MAX, ttl=cache_seconds, timer=clock.now
        )
        #: user id -> whether the workers of their endpoints may call in (not disabled): a
        #: worker token is not a key, but a disabled user's workers stop as their keys do.
        self._owners: TTLCache[str, bool, float] = TTLCache(
            maxsize=_KEYS_CACHED_MAX, ttl=cache_seconds, timer=clock.now
        )
        self._worker_secret: bytes | None = None
        #: worker token -> the endpoint it was checked for.
        self._checked_tokens: LRUCache[str, str] = LRUCache(maxsize=_CHECKED_TOKENS_MAX)
        #: endpoint id -> its ``lb_key``: a plain dict, read on every proxied request; emptied
        #: when it holds ``_CHECKED_TOKENS_MAX`` (deleted endpoints' keys go then).
        self._lb_keys: dict[str, str] = {}

    async def caller(self, key: str) -> Caller:
        """Who calls with an API key, and what the key may do (``api/credentials.py`` reads
        it from the request); each route then checks its ``Need`` with ``Caller.check``."""
        caller = await self._caller_of_key(key)
        if caller is None:
            raise Unauthorized("invalid or revoked API key")
        return caller

    async def authorize(self, key: str, access: Access, endpoint_id: str | None = None) -> User:
        """The user of ``key``, if the key may make a call needing ``access`` (401 else)."""
        caller = await self.caller(key)
        caller.check(access, endpoint_id)
        return caller.user

    async def authenticate(self, key: str) -> User:
        """The user of an API key, whatever it may do: for tests and tools, not routes."""
        return (await self.caller(key)).user

    async def _caller_of_key(self, key: str) -> Caller | None:
        digest = keys.hash_key(key)
        try:  # a cached None (an unknown or revoked key) is an answer too, hence no .get()
            return self._cache[digest]
        except KeyError:
            caller = await self.caller_of_digest(digest)
            self._cache[digest] = caller
            return caller

    def forget(self, *, key_id: str | None = None, user_id: str | None = None) -> None:
        """Drop what the cache holds of a key just revoked or a user just disabled, so that
        this server refuses them at once (the others within the cache time)."""
        for digest, caller in list(self._cache.items()):
            if caller is not None and (caller.key_id == key_id or caller.user.id == user_id):
                self._cache.pop(digest, None)
        if user_id is not None:
            self._owners.pop(user_id, None)

    async def caller_of_digest(self, digest: str) -> Caller | None:
        """The caller of a key by its hash, if the key is known and not revoked and its user
        not disabled, read now (the console's sessions hold the hash, and a revoked key or a
        disabled user ends them at once)."""
        found = await self._store.find_api_key(digest)
        if found is None:
            return None
        record, user = found
        if record.revoked_at is not None or user.disabled:
            return None
        return Caller(user, record.permissions, record.id)

    async def user_of_digest(self, digest: str) -> User | None:
        caller = await self.caller_of_digest(digest)
        return caller.user if caller is not None else None

    async def server_secret(self, name: str) -> bytes:
        """A secret of this server (made on first use, the same on every replica)."""
        return await self._store.secret(name)

    async def worker_secret(self) -> bytes:
        if self._worker_secret is None:
            self._worker_secret = await self.server_secret("worker-token")
        return self._worker_secret

    async def worker_token(self, endpoint_id: str) -> str:
        return keys.worker_token(await self.worker_secret(), endpoint_id)

    def known_lb_key(self, endpoint_id: str) -> str | None:
        """``lb_key`` without a wait, once it was asked for once (the proxy's every request)."""
        return self._lb_keys.get(endpoint_id)

    async def lb_key(self, endpoint_id: str) -> str:
        """``keys.lb_key`` of the endpoint, computed once."""
        key = self._lb_keys.get(endpoint_id)
        if key is None:
            if len(self._lb_keys) >= _CHECKED_TOKENS_MAX:
                self._lb_keys.clear()
            key = self._lb_keys[endpoint_id] = keys.lb_key(await self.worker_secret(), endpoint_id)
        return key

    async def check_worker(self, endpoint_id: str, token: str) -> None:
        # Every worker request carries its token: remember the ones already checked rather
        # than compute an HMAC each time (the secret never changes while skiff runs).
        if self._checked_tokens.get(token) == endpoint_id:
            return
        if not keys.check_worker_token(await self.worker_secret(), endpoint_id, token):
            raise Unauthorized(await self._not_a_worker_token(token))
        self._checked_tokens[token] = endpoint_id

    async def check_worker_owner(self, user_id: str) -> None:
        """Refuse (401) the workers of a disabled user's endpoints, within the keys' cache time
        on other replicas: their token is the endpoint's and outlives the user's keys."""
        try:  # a cached False is an answer too, hence no .get()
            active = self._owners[user_id]
        except KeyError:
            user = await self._store.get_user(user_id)
            active = user is None or not user.disabled
            self._owners[user_id] = active
        if not active:
            raise Unauthorized("the owner of this endpoint is disabled")

    async def _not_a_worker_token(self, token: str) -> str:
        """Why ``token`` is refused on the worker routes. A worker started by hand on a machine
        where ``runpod config`` was run sends that user API key (the SDK falls back on
        ``~/.runpod/config.toml``) and would be refused for ever without knowing why."""
        if await self._caller_of_key(token) is None:
            return "invalid worker token for this endpoint"
        return (
            "this is a user API key, not a worker token: a worker authenticates with its "
            "endpoint's worker token; print it with `skiff worker-token <endpoint id>` and give "
            "it to the worker as RUNPOD_AI_API_KEY (a key from `runpod config`, in "
            "~/.runpod/config.toml, is a user API key)"
        )

    async def ensure_user(self, name: str, is_admin: bool) -> User:
        user = await self._store.get_user_by_name(name)
        if user is None:
            try:
                user = await self._store.create_user(
                    User(id=short_id(), name=name, is_admin=is_admin, created_at=self._clock.now())
                )
            except Conflict:
                # Another replica starting at the same time made it first.
                user = await self._store.get_user_by_name(name)
                if user is None:
                    raise
        return user

    async def register_key(
        self, key: str, user: User, label: str, permissions: Permissions = ALL
    ) -> IssuedKey:
        record = ApiKey(
            id=short_id(10),
            user_id=user.id,
            hint=keys.key_hint(key),
            label=label,
            created_at=self._clock.now(),
            revoked_at=None,
            permissions=permissions,
        )
        await self._store.add_api_key(record, keys.hash_key(key))
        return IssuedKey(key=key, record=record, user=user)

    async def issue_key(self, user_name: str, is_admin: bool, label: str) -> IssuedKey:
        user = await self.ensure_user(user_name, is_admin)
        return await self.register_key(keys.new_api_key(), user, label)

    async def bootstrap_admin(self, configured_key: str | None) -> IssuedKey | None:
        """Make sure an administrator can get in. Returns a key only when it was just made
        here and must be shown once; a configured key is registered but never echoed."""
        admin = await self.ensure_user(ADMIN_USER, is_admin=True)
        if configured_key:
            if await self._store.find_api_key(keys.hash_key(configured_key)) is None:
                with contextlib.suppress(Conflict):  # registered by a replica starting too
                    await self.register_key(configured_key, admin, "SKIFF_API_KEY")
            return None
        existing = [k for k, u in await self._store.list_api_keys() if u.id == admin.id]
        if existing:
            return None
        return await self.register_key(keys.new_api_key(), admin, "first start")
