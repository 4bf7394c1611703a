"""Whether an error means the database cannot be reached right now, for the interfaces to
answer 503 and a retry rather than a 500: they see services, never the store."""

from __future__ import annotations

from skiff.store.outages import unavailable


def database_unreachable(exc: BaseException) -> bool:
    """True for a connection lost, refused or timed out (nothing accepted was lost)."""
    return unavailable(exc)
