"""Where a worker provider reports that a worker's process ended, whoever ended it.

The provider is built first and given to the fleet, which handles the exits: the two meet here
rather than through a callback set on one after the other is built. The composition root hands
the provider ``report``; the fleet subscribes when it is built.
"""

from __future__ import annotations

from skiff.providers.base import ExitCallback


class WorkerExits:
    def __init__(self) -> None:
        self._handlers: list[ExitCallback] = []

    def subscribe(self, handler: ExitCallback) -> None:
        self._handlers.append(handler)

    async def report(self, worker_id: str, code: int) -> None:
        """The provider's ``ExitCallback``: tell every handler, in the order they subscribed."""
        for handler in self._handlers:
            await handler(worker_id, code)
