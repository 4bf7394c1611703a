"""Who may run without the sandbox: the rule that keeps one tenant's code from another's.

Every local worker and pod runs in the sandbox (providers/bubblewrap.py). Where the provider
cannot make one (no bubblewrap, user namespaces turned off, a Ray cluster), the server still
serves its single-user case: the administrator's own workers and pods run as they are, and other
users' do not start; their endpoints (``placement``) and pods (``problem``) say why and what to
install. ``SKIFF_SANDBOX=off`` is the operator saying every user is trusted: nothing is held
back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from skiff.services.auth import ADMIN_USER
from skiff.store.base import Store


class SandboxingProvider(Protocol):
    async def sandbox_problem(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Verdict:
    #: Start it in the sandbox (False: as it is, the administrator's on a host without one).
    sandboxed: bool
    #: Why it must not start at all, in words for its owner; None: it may.
    refused: str | None = None


IN_SANDBOX = Verdict(sandboxed=True)


def refusal(problem: str) -> str:
    return (
        f"this server cannot run your workers and pods in a sandbox ({problem}), and only the "
        "administrator's run without one; the operator can install bubblewrap (Debian's "
        "bubblewrap package) with user namespaces allowed, or use SKIFF_PROVIDER=docker"
    )


class Isolation:
    def __init__(self, store: Store, *, enabled: bool) -> None:
        self._store = store
        self._enabled = enabled
        #: The administrator's user id, read once (it never changes).
        self._admin_id: str | None = None

    async def _is_admin(self, user_id: str) -> bool:
        if self._admin_id is None:
            admin = await self._store.get_user_by_name(ADMIN_USER)
            if admin is None:
                return False
            self._admin_id = admin.id
        return user_id == self._admin_id

    async def verdict(self, provider: SandboxingProvider, user_id: str) -> Verdict:
        """How ``user_id``'s next worker or pod on ``provider`` starts, if it starts."""
        if not self._enabled:
            return IN_SANDBOX  # the providers were built without one: nothing to hold back
        problem = await provider.sandbox_problem()
        if problem is None:
            return IN_SANDBOX
        if await self._is_admin(user_id):
            return Verdict(sandboxed=False)
        return Verdict(sandboxed=False, refused=refusal(problem))
