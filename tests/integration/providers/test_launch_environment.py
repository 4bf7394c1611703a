"""What a tenant's own variables (a template's, endpoint's or pod's ``env``, which the launch's
environment holds) can and cannot reach: the shim that starts every local worker runs as the
server's user, outside the sandbox, before the tenant's command. Real subprocesses, no cgroups
(``SKIFF_PROCESS_LIMITS=off``, or a host where the server may make none)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from skiff.providers.base import Launch
from skiff.providers.cgroups import CGROUP_ENV, joining
from skiff.providers.local import LocalProvider
from skiff.services.logs import WorkerLogs


async def test_a_tenants_cgroup_variable_never_reaches_the_shim(tmp_path: Path) -> None:
    """The shim writes its pid to every file ``SKIFF_CGROUP_PROCS`` names: taken from a
    tenant's env it would truncate any file the server may write (its secret key, its
    database). Without a cgroup of its own the worker starts as if the variable were not
    there, and sees none."""
    victim = tmp_path / "secret.key"
    victim.write_text("the server's key")
    canary = tmp_path / "canary"
    exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def on_exit(_worker_id: str, code: int) -> None:
        exited.set_result(code)

    logs = WorkerLogs(tmp_path / "logs", 1 << 20, 1)
    provider = LocalProvider(on_exit, logs=logs.sink, fork_servers=False)
    env = dict(os.environ) | {CGROUP_ENV: f"{canary}\n{victim}"}
    code = f"import os, sys; sys.exit(3 if {CGROUP_ENV!r} in os.environ else 0)"
    await provider.start(
        Launch(
            worker_id="w1",
            endpoint_id="ep1",
            argv=[sys.executable, "-c", code],
            env=env,
            home=tmp_path / "home",
        )
    )
    assert await asyncio.wait_for(exited, 30) == 0
    assert victim.read_text() == "the server's key"
    assert not canary.exists()


def test_only_the_servers_own_group_is_named_to_the_shim() -> None:
    tenant = {"PATH": "/usr/bin", CGROUP_ENV: "/data/secret.key"}
    assert joining(tenant, None) == {"PATH": "/usr/bin"}
