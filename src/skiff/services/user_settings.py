"""A user's own settings: for now the public SSH key the runpod SDK's ``update_user_settings``
sets and its ``get_user`` reads back, also ``/v1/user`` and the console's settings page; the
user's pods get it as ``PUBLIC_KEY`` (services/secrets.py ``pod_env``)."""

from __future__ import annotations

from skiff.domain.users import User
from skiff.errors import Invalid
from skiff.store.base import Store

#: Several keys, one a line, fit well within this.
MAX_PUB_KEY_LENGTH = 16_384


class UserSettings:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def pub_key(self, user: User) -> str | None:
        return await self._store.get_pub_key(user.id)

    async def set_pub_key(self, user: User, pub_key: str) -> str:
        """Keep ``pub_key`` (public keys, one a line); 400 on ``pubKey`` for what is none."""
        if len(pub_key) > MAX_PUB_KEY_LENGTH:
            raise Invalid(f"pubKey: at most {MAX_PUB_KEY_LENGTH} characters", field="pubKey")
        if any(not (ch.isprintable() or ch == "\n") for ch in pub_key):
            raise Invalid("pubKey: public keys are printable text, one a line", field="pubKey")
        await self._store.set_pub_key(user.id, pub_key)
        return pub_key
