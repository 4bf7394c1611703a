"""The leader's hooks: taking up the lead runs ``on_gain`` once, and while it leads only the
clean-up (``on_sweep``) repeats. A repeated ``on_gain`` resumed metering anew at each sweep, so
the time of a volume made before a sweep was billed from the sweep on."""

from __future__ import annotations

import asyncio

from skiff.cluster.local import LocalCluster
from skiff.services.leadership import Leadership


async def test_a_leader_takes_up_the_lead_once_and_then_only_sweeps() -> None:
    calls: list[str] = []

    async def hook(name: str) -> None:
        calls.append(name)

    async def loop() -> None:
        await asyncio.Event().wait()

    leadership = Leadership(
        LocalCluster("local"),
        {"loop": loop},
        on_gain=lambda: hook("gain"),
        on_loss=lambda: hook("loss"),
        on_sweep=lambda: hook("sweep"),
        interval=0.01,
        sweep_every=0.0,
    )
    try:
        for _ in range(3):
            await leadership.step()
        assert leadership.running_loops
    finally:
        await leadership.stop()
    assert calls == ["gain", "sweep", "sweep"]
