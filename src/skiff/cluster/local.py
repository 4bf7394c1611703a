"""The single-replica cluster of the embedded SQLite default: every wake-up is in-process."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable


class LocalCluster:
    """Always leading, alone, and with nobody to notify."""

    max_wait: float | None = None
    alone = True

    def __init__(self, url: str) -> None:
        self.replica_id = secrets.token_hex(6)
        self.url = url

    async def start(
        self, on_keys: Callable[[list[str]], None], on_lost: Callable[[], None]
    ) -> None:
        # No other replica can publish and there is no connection to lose.
        pass

    async def close(self) -> None:
        pass

    def publish(self, key: str) -> None:
        # In-process waiters are woken by the caller; no other replica exists.
        pass

    @property
    def leading(self) -> bool:
        return True

    async def campaign(self) -> bool:
        return True

    async def resign(self) -> None:
        # Nobody could take over; the loops stop with the process anyway.
        pass

    async def alive(self, replica_ids: Iterable[str]) -> set[str]:
        return {self.replica_id} & set(replica_ids)

    async def peers(self) -> dict[str, str]:
        return {self.replica_id: self.url}

    async def hosts(self) -> dict[str, tuple[str, list[str]]]:
        # Alone: no other host to keep deliveries from.
        return {self.replica_id: (self.url, [])}

    async def readdress(self, addresses: Iterable[str]) -> None:
        # Alone: no other replica's webhooks to keep from this host.
        pass

    async def leader(self) -> tuple[str, str] | None:
        return (self.replica_id, self.url)
