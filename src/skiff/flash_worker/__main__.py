"""``python -m skiff.flash_worker``: an ordinary runpod worker whose handler runs Flash calls.

It lets the SDK hold ``TAKE_AHEAD`` jobs although it runs one call at a time (the handler's
lock): a worker at the SDK's default concurrency of one asks for its next job only on a
one-second tick after the last ended (docs/workers.md), which would put a second on every call
of a client that calls, waits and calls again, as Flash code does. With room to spare, its take
for the next job is already waiting when a call ends, and at most ``TAKE_AHEAD - 1`` calls wait
behind a running one on the same worker (fewer in practice: skiff lines up only what the
worker would start within a tick, services/lineup.py).
"""

from __future__ import annotations

import runpod  # type: ignore[import-untyped]

from .handler import handle

#: Jobs the SDK may hold at once: one running, the rest next in line. Five is the least with
#: which it always asks for two or more at once (it counts a job just taken twice), which is
#: what skiff's held job-done answer needs to hand it the next job the moment the last one ends
#: (docs/workers.md, "Workers that take several jobs"); with three, each call waits for the
#: SDK's 100 ms tick.
TAKE_AHEAD = 5


def _take_ahead(current: int) -> int:
    # A constant: the SDK rebuilds its queue, waiting for it to empty, whenever this changes.
    return TAKE_AHEAD


if __name__ == "__main__":
    runpod.serverless.start({"handler": handle, "concurrency_modifier": _take_ahead})
