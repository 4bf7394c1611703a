"""``SKIFF_MAX_PER_USER`` (domain/quotas.py) checked before each resource a user makes."""

from __future__ import annotations

from skiff.domain.quotas import Owned, check_room
from skiff.domain.users import User
from skiff.store.base import Store


class Quotas:
    """How many of each kind a user may hold; ``most`` 0: no bound. Counted when one is made,
    so requests racing each other may pass the bound by the few that were in flight: a bound
    on what a tenant can pile up, not an exact count."""

    def __init__(self, store: Store, most: int) -> None:
        self._store = store
        self._most = most

    async def make_room(self, user: User, kind: Owned) -> None:
        """Refuse (409) a new ``kind`` for a user who holds the most already."""
        if self._most and not user.is_admin:
            check_room(kind, await self._store.count_owned(kind, user.id), self._most)
