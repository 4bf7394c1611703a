"""Whether an error means the database cannot be reached right now, or its disk is full, for the
interfaces to answer 503 or 507 and a retry rather than a 500: they see services, never the
store."""

from __future__ import annotations

from skiff.store.outages import disk_full, unavailable


def database_unreachable(exc: BaseException) -> bool:
    """True for a connection lost, refused or timed out (nothing accepted was lost)."""
    return unavailable(exc)


def storage_full(exc: BaseException) -> bool:
    """True when the database's disk had no room for a write (nothing of it was kept)."""
    return disk_full(exc)
