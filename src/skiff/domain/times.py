"""How ``/v1`` prints a time: ISO 8601, UTC, milliseconds, ``Z`` (``2026-11-23T16:10:16.123Z``),
as the platform's public reference does. ``/v2`` is the runpod SDK's wire and keeps its own
formats; its ``/requests`` times happen to be this one."""

from __future__ import annotations

import datetime as dt


def iso(ts: float) -> str:
    """``ts`` (epoch seconds) as ISO 8601 UTC with milliseconds and ``Z``."""
    return (
        dt.datetime.fromtimestamp(ts, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
