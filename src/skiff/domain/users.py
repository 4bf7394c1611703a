"""Who owns endpoints, templates and keys: a user of this server."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class User:
    id: str
    name: str
    is_admin: bool
    created_at: float
    #: When an administrator disabled them: their keys and console sessions are refused.
    disabled_at: float | None = None

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None
