"""Sandboxed workers forked from their endpoint's zygote (providers/fork_server.py), with real
bubblewrap and real processes: the zygote runs in the endpoint's sandbox, so a worker forked
from it is as hidden from the data directory and other endpoints as one started plainly, has its
own home, is known to the server by its pid on the host (not the sandbox's numbering), gets its
SIGTERM grace, and what cannot come from such a zygote (a GPU worker) starts plainly."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import signal
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from eventually import eventually_async
from pod_programs import pod_port
from process_exits import Exits
from skiff.domain.gpus import Gpu
from skiff.providers import bubblewrap, fork_server, forked, port_fence
from skiff.providers.base import Launch, ServedPorts
from skiff.providers.fork_server import SandboxSpot, ZygoteKey, _Start, _Zygote
from skiff.providers.local import LocalProvider
from skiff.services.logs import WorkerLogs

pytestmark = [
    pytest.mark.skipif(bubblewrap.executable() is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(sys.platform != "linux", reason="zygotes need PDEATHSIG"),
]

_REPORT = """\
import json, os, signal, socket, sys, time
def bind(port):
    if port is None:
        return None
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", int(port)))
        except OSError as exc:
            return exc.errno
    return "bound"
home = os.environ["HOME"]
open(os.path.join(home, "mine"), "w").write(os.environ["RUNPOD_POD_ID"])
print("REPORT " + json.dumps({
    "preloaded": "aiohttp" in sys.modules,
    "uid": os.getuid(),
    "ppid": os.getppid(),
    "home": home,
    "token": os.environ.get("WORKER_TOKEN"),
    "db": os.path.exists(sys.argv[1] + "/skiff.db"),
    "other": os.path.exists(sys.argv[1] + "/workers/ep2/w9/home/secret"),
    "pids": len([p for p in os.listdir("/proc") if p.isdigit()]),
    "bind": bind(os.environ.get("TRY_PORT")),
    "oom_score_adj": open("/proc/self/oom_score_adj").read().strip(),
}), flush=True)
if sys.argv[2:] == ["crash"]:
    raise RuntimeError("the handler failed to load")
if len(sys.argv) > 2:
    signal.signal(signal.SIGTERM, lambda *_: (print("graceful", flush=True), sys.exit(3)))
    time.sleep(60)
"""


def _nspid(pid: int) -> list[int]:
    """A process's pid in each PID namespace it is in, the host's first."""
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("NSpid:"))
    return [int(n) for n in line.split()[1:]]


class Box:
    def __init__(self, tmp_path: Path) -> None:
        self.data = tmp_path / "data"
        secret = self.data / "workers" / "ep2" / "w9" / "home"
        secret.mkdir(parents=True)
        (secret / "secret").write_text("OTHER-ENDPOINT")
        (self.data / "skiff.db").write_text("DATABASE")
        self.script = tmp_path / "app" / "report.py"
        self.script.parent.mkdir()
        self.script.write_text(_REPORT)
        self.exits = Exits()
        self.logs = WorkerLogs(self.data, 1 << 20, 1)
        sandbox = bubblewrap.Sandbox.for_server(
            self.data, volumes_dir=self.data / "volumes", database_file=self.data / "skiff.db"
        )
        self.provider = LocalProvider(self.exits, logs=self.logs.sink, sandbox=sandbox)
        self.count = 0

    def launch(self, *args: str, endpoint_id: str = "ep1", **more: object) -> Launch:
        self.count += 1
        worker_id = f"w{self.count}"
        homes = self.data / "workers" / endpoint_id
        home = homes / worker_id / "home"
        return Launch(
            worker_id=worker_id,
            endpoint_id=endpoint_id,
            argv=[sys.executable, str(self.script), str(self.data), *args],
            env=dict(os.environ)
            | {"RUNPOD_POD_ID": worker_id, "HOME": str(home), "WORKER_TOKEN": worker_id},
            home=home,
            homes=homes,
            **more,  # type: ignore[arg-type]
        )

    def report(self, worker_id: str, endpoint_id: str = "ep1") -> dict[str, object]:
        text = self.logs.log_path(endpoint_id, worker_id).read_text()
        [line] = [line for line in text.splitlines() if "REPORT " in line]
        return dict(json.loads(line.split("REPORT ", 1)[1]))

    async def run(self, launch: Launch) -> int:
        await self.provider.start(launch)
        await eventually_async(lambda: launch.worker_id in self.exits.codes, "the exit")
        return self.exits.codes[launch.worker_id]

    def zygotes(self) -> list[str]:
        """The endpoints whose zygote is ready."""
        servers = self.provider.fork_servers
        assert servers is not None
        return [
            Path(k.sandbox.homes).name
            for k in list(servers._zygotes)
            if k.sandbox is not None and servers.ready(k)
        ]

    async def zygote_ready(self, endpoint_id: str = "ep1") -> None:
        await eventually_async(lambda: endpoint_id in self.zygotes(), "the endpoint's zygote")


@pytest.fixture
async def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    # Started at once here: the delay is for a busy host, tested on its own below.
    monkeypatch.setattr(fork_server, "SANDBOXED_START_SECONDS", 0.0)
    made = Box(tmp_path)
    yield made
    await made.provider.stop_all(1)


async def test_a_sandboxed_worker_is_forked_in_its_endpoints_sandbox(box: Box) -> None:
    first = box.launch()
    assert await box.run(first) == 0
    await box.zygote_ready()
    second = box.launch()
    assert await box.run(second) == 0

    plain, forked = box.report(first.worker_id), box.report(second.worker_id)
    assert not plain["preloaded"] and plain["ppid"] == 1  # under the sandbox's init
    assert forked["preloaded"] and forked["ppid"] != 1  # under the zygote
    for report, launch in ((plain, first), (forked, second)):
        assert report["uid"] == bubblewrap.SANDBOX_UID
        assert report["home"] == str(launch.home) and report["token"] == launch.worker_id
        assert (launch.home / "mine").read_text() == launch.worker_id
        assert report["db"] is False and report["other"] is False
        assert int(str(report["pids"])) <= 6, report
        # Out of memory, the kernel ends a tenant's worker first, never the server.
        assert report["oom_score_adj"] == "1000"


async def test_a_forked_sandboxed_worker_is_stopped_by_its_host_pid_with_grace(
    box: Box,
) -> None:
    await box.run(box.launch())
    await box.zygote_ready()
    launch = box.launch("wait")
    pid = await box.provider.start(launch)
    path = box.logs.log_path("ep1", launch.worker_id)
    await eventually_async(lambda: path.exists() and "REPORT" in path.read_text(), "its report")
    # The host's pid of the worker itself, numbered otherwise inside (NSpid: host, sandbox).
    nspid = _nspid(pid)
    assert nspid[0] == pid and len(nspid) == 2
    await box.provider.stop(launch.worker_id, 10)
    await eventually_async(lambda: launch.worker_id in box.exits.codes, "the exit")
    assert box.exits.codes[launch.worker_id] == 3
    assert "graceful" in path.read_text()


async def test_a_forked_sandboxed_worker_that_crashes_reports_its_code_and_traceback(
    box: Box,
) -> None:
    await box.run(box.launch())
    await box.zygote_ready()
    launch = box.launch("crash")
    assert await box.run(launch) == 1  # as a plain `python script.py` would exit
    assert box.report(launch.worker_id)["preloaded"]  # it did come out of the zygote
    log = box.logs.log_path("ep1", launch.worker_id).read_text()
    assert "RuntimeError: the handler failed to load" in log and "Traceback" in log


async def test_a_gpu_worker_is_not_forked_in_a_sandbox(box: Box) -> None:
    await box.run(box.launch())
    await box.zygote_ready()
    gpu = Gpu(index=0, name="NVIDIA GeForce RTX 4090")
    launch = box.launch(gpus=(gpu,))
    assert await box.run(launch) == 0
    assert box.report(launch.worker_id)["ppid"] == 1


async def test_an_idle_sandboxed_zygote_is_ended(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    await box.run(box.launch())
    await box.zygote_ready()
    monkeypatch.setattr(fork_server, "IDLE_SECONDS", 0.0)
    # The next start finds the zygote idle: it is ended, and the worker starts plainly.
    launch = box.launch()
    assert await box.run(launch) == 0
    assert box.report(launch.worker_id)["ppid"] == 1
    servers = box.provider.fork_servers
    assert servers is not None and not any(servers.ready(k) for k in servers._zygotes)


async def test_no_zygote_is_started_for_an_endpoint_deleted_in_the_meantime(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its timer is run by hand below: a run that outlasted a short delay on a busy host
    # would otherwise start the zygote before the delete.
    monkeypatch.setattr(fork_server, "SANDBOXED_START_SECONDS", 60.0)
    launch = box.launch()
    assert await box.run(launch) == 0
    servers = box.provider.fork_servers
    assert servers is not None and servers._zygotes == {}
    [(key, timer)] = servers._later.items()
    shutil.rmtree(launch.homes)  # what deleting the endpoint does (services/fleet.py)
    timer.cancel()
    servers._start_if_wanted(key)
    assert servers._zygotes == {} and servers._later == {}


async def test_beyond_the_cap_a_new_zygote_ends_the_one_idle_longest(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fork_server, "MAX_SANDBOXED", 1)
    await box.run(box.launch())
    await box.zygote_ready("ep1")
    await box.run(box.launch(endpoint_id="ep3"))
    await box.zygote_ready("ep3")
    await eventually_async(lambda: box.zygotes() == ["ep3"], "ep1's zygote to end")


def test_what_a_zygote_says_is_checked_and_garbage_is_dropped() -> None:
    spot = SandboxSpot("/h", "/c", None, "/runpod-volume", "/c/s.py")
    zygote = _Zygote(ZygoteKey("/usr/bin/python3", (), spot), _Start({}, None, None))
    for packet, sender in (
        (b"not json", 10),
        (b'{"forked": "x", "pid": 3}', 10),
        (b'{"forked": 1, "pid": 3}', None),  # no credentials: not believed
        (b'{"exited": 99, "code": 0}', 10),  # no such worker
        (b"[1, 2]", 10),
    ):
        zygote._on_message(packet, sender)
    assert zygote._children == {} and zygote._waiting == {}


async def test_a_worker_announced_for_no_waiting_fork_is_killed(box: Box) -> None:
    """A forked process nobody waits for any more (or a tenant's forgery) is not adopted."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)", start_new_session=True
    )
    spot = SandboxSpot("/h", "/c", None, "/runpod-volume", "/c/s.py")
    zygote = _Zygote(ZygoteKey("/usr/bin/python3", (), spot), _Start({}, None, None))
    zygote._on_message(b'{"forked": 7, "pid": 3}', proc.pid)
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL
    assert not zygote._children


@pytest.mark.skipif(port_fence.fence_problem() is not None, reason="this kernel cannot fence ports")
async def test_a_forked_worker_binds_no_port_of_its_own_and_one_that_serves_starts_plainly(
    box: Box,
) -> None:
    await box.run(box.launch())
    await box.zygote_ready()
    port = pod_port()  # below the ephemeral range, which every process may bind
    queue = box.launch()
    queue = replace(queue, env=queue.env | {"TRY_PORT": str(port)})
    assert await box.run(queue) == 0
    report = box.report(queue.worker_id)
    assert report["preloaded"] and report["bind"] == errno.EACCES
    # Its zygote's fence would keep it from the ports it serves on: it starts the plain way.
    served = box.launch(serves=ServedPorts(port, port))
    served = replace(served, env=served.env | {"TRY_PORT": str(port)})
    assert await box.run(served) == 0
    report = box.report(served.worker_id)
    assert not report["preloaded"] and report["bind"] == "bound"


#: A tenant's own ``runpod`` package on its ``PYTHONPATH``, which its endpoint's zygote imports:
#: it makes the zygote reap its workers and never say so.
_SILENT_REAPER = """\
import os, sys

def _reap(sock):
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return

sys.modules["__main__"]._reap = _reap
"""


async def test_a_worker_its_zygote_reaps_without_a_word_is_still_seen_to_end(
    box: Box, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its end comes from its pidfd: before, the server waited for the report for ever and
    held the worker's pid, which the host gives to its next process."""
    monkeypatch.setattr(forked, "REPORT_SECONDS", 0.2)
    package = tmp_path / "tenant-path" / "runpod"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(_SILENT_REAPER)

    def tenants(launch: Launch) -> Launch:
        return replace(launch, env=launch.env | {"PYTHONPATH": str(package.parent)})

    assert await box.run(tenants(box.launch())) == 0
    await box.zygote_ready()
    launch = tenants(box.launch())
    assert await box.run(launch) == forked.EXIT_NOT_REPORTED
    assert box.report(launch.worker_id)["ppid"] != 1  # it did come out of the zygote
    # And the worker is forgotten: stopping it signals nothing.
    killed: list[int] = []
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: killed.append(pgid))
    await box.provider.stop(launch.worker_id, 1)
    assert killed == []
