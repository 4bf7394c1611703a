"""Workers forked from a zygote (providers/fork_server.py) with real processes: they run as a
fresh ``python script.py`` would (environment, arguments, working directory, path, output,
exit code, signals), the runpod SDK is imported again under the worker's own environment, and
what cannot come from a zygote starts the plain way."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
from tests.eventually import eventually

from skiff.domain.logs import parse
from skiff.providers.base import Launch
from skiff.providers.fork_server import forkable
from skiff.providers.local import LocalProvider
from skiff.services.logs import WorkerLogs

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="zygotes need PDEATHSIG")

_REPORT = """\
import json, os, sys
print("REPORT " + json.dumps({
    "preloaded": "aiohttp" in sys.modules,
    "ppid": os.getppid(),
    "pgid": os.getpgid(0),
    "pid": os.getpid(),
    "argv": sys.argv,
    "cwd": os.getcwd(),
    "path0": sys.path[0],
    "token": os.environ.get("WORKER_TOKEN"),
    "first_secret": os.environ.get("FIRST_TENANT_SECRET"),
    "main": __name__,
    "policy": os.sched_getscheduler(0),
    "oom_score_adj": open("/proc/self/oom_score_adj").read().strip(),
}), flush=True)
"""


class Exits:
    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    async def __call__(self, worker_id: str, code: int) -> None:
        self.codes[worker_id] = code


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.logs = WorkerLogs(tmp_path / "logs", 1 << 20, 1)
        self.exits = Exits()
        self.provider = LocalProvider(self.exits, cwd=tmp_path, logs=self.logs.sink)
        self.count = 0

    def script(self, body: str, name: str = "handler.py") -> Path:
        folder = self.tmp / "app"
        folder.mkdir(exist_ok=True)
        path = folder / name
        path.write_text(body)
        return path

    def launch(self, argv: list[str], env: dict[str, str] | None = None, **more: object) -> Launch:
        self.count += 1
        return Launch(
            worker_id=f"w{self.count}",
            endpoint_id="ep",
            argv=argv,
            env=dict(os.environ) | {"WORKER_TOKEN": f"t{self.count}"} | (env or {}),
            home=self.tmp / "home" / str(self.count),
            **more,  # type: ignore[arg-type]
        )

    async def warm(self, launch: Launch) -> None:
        """Starts ``launch`` (plainly: the first of its kind starts the zygote) to its end,
        then waits for the zygote."""
        await self.run(launch)
        plan = forkable(launch)
        assert plan is not None and self.provider.fork_servers is not None
        servers = self.provider.fork_servers
        await asyncio.to_thread(eventually, lambda: servers.ready(plan.key), "the zygote")

    async def run(self, launch: Launch) -> int:
        await self.provider.start(launch)
        await asyncio.to_thread(
            eventually, lambda: launch.worker_id in self.exits.codes, "the exit"
        )
        return self.exits.codes[launch.worker_id]

    def lines(self, launch: Launch) -> list[str]:
        path = self.logs.log_path(launch.endpoint_id, launch.worker_id)
        return [parse(raw)[1] for raw in path.read_bytes().splitlines()]

    def report(self, launch: Launch) -> dict[str, object]:
        import json

        [line] = [line for line in self.lines(launch) if line.startswith("REPORT ")]
        report: dict[str, object] = json.loads(line.removeprefix("REPORT "))
        return report


@pytest.fixture
async def harness(tmp_path: Path) -> object:
    h = Harness(tmp_path)
    yield h
    await h.provider.stop_all(1)


async def test_the_first_worker_starts_plainly_and_the_next_is_forked_as_a_fresh_one(
    harness: Harness,
) -> None:
    script = harness.script(_REPORT)
    # The launch that starts the zygote is another tenant's: nothing of its own reaches it.
    first = harness.launch([sys.executable, str(script), "a"], {"FIRST_TENANT_SECRET": "s1"})
    await harness.warm(first)
    assert harness.report(first)["preloaded"] is False
    assert harness.report(first)["ppid"] == os.getpid()

    second = harness.launch([sys.executable, str(script), "b", "--x"], cwd=harness.tmp / "app")
    assert await harness.run(second) == 0
    report = harness.report(second)
    assert report["preloaded"] is True, "the SDK's dependencies came with the fork"
    assert report["ppid"] != os.getpid(), "a child of the zygote"
    assert report["pgid"] == report["pid"], "a process group of its own, for stop()"
    assert report["argv"] == [str(script), "b", "--x"]
    assert report["cwd"] == str(harness.tmp / "app")
    assert report["path0"] == str(script.parent)
    assert report["token"] == "t2", "the worker's own environment, not the zygote's"
    assert report["first_secret"] is None, "the zygote carries no tenant's variables"
    assert report["main"] == "__main__"
    # The zygote imported the SDK on idle CPU only (a thread of its own): its workers run at
    # the normal policy, as a plainly started one does.
    assert report["policy"] == os.SCHED_OTHER == harness.report(first)["policy"]
    # Out of memory, the kernel ends a worker first, never the server (local.py's shim).
    assert report["oom_score_adj"] == "1000" == harness.report(first)["oom_score_adj"]


async def test_the_sdk_is_imported_again_under_the_workers_own_environment(
    harness: Harness,
) -> None:
    script = harness.script(
        "import runpod\n"
        "from runpod.serverless.modules import worker_state, rp_job\n"
        "print('ID', worker_state.WORKER_ID, rp_job.JOB_GET_URL, flush=True)\n"
    )
    env = {"RUNPOD_POD_ID": "pod-1", "RUNPOD_WEBHOOK_GET_JOB": "http://x/take/$ID"}
    await harness.warm(harness.launch([sys.executable, str(script)], env))
    env = {"RUNPOD_POD_ID": "pod-2", "RUNPOD_WEBHOOK_GET_JOB": "http://y/take/$ID"}
    forked = harness.launch([sys.executable, str(script)], env)
    assert await harness.run(forked) == 0
    assert "ID pod-2 http://y/take/pod-2" in harness.lines(forked)


async def test_exit_codes_tracebacks_and_output_arrive_as_from_a_plain_process(
    harness: Harness,
) -> None:
    script = harness.script(_REPORT)
    await harness.warm(harness.launch([sys.executable, str(script)]))
    exits = harness.launch(
        [sys.executable, str(harness.script("import sys\nsys.exit(7)\n", "x.py"))]
    )
    assert await harness.run(exits) == 7
    raises = harness.launch(
        [
            sys.executable,
            "-u",
            str(harness.script("print('before')\nimport nosuchmodule\n", "y.py")),
        ]
    )
    assert await harness.run(raises) == 1
    lines = harness.lines(raises)
    assert lines[0] == "before"
    assert lines[-1] == "ModuleNotFoundError: No module named 'nosuchmodule'"


async def _stopped(harness: Harness, body: str, name: str, grace: float) -> tuple[int, list[str]]:
    """A forked worker running ``body`` (which prints ``up``) stopped with ``grace``: its exit
    code and log."""
    worker = harness.launch([sys.executable, str(harness.script(body, name))])
    pid = await harness.provider.start(worker)
    assert _parent(pid) != os.getpid(), "forked from the zygote"
    await asyncio.to_thread(eventually, lambda: "up" in harness.lines(worker), "up")
    await harness.provider.stop(worker.worker_id, grace=grace)
    await asyncio.to_thread(eventually, lambda: worker.worker_id in harness.exits.codes, "exit")
    return harness.exits.codes[worker.worker_id], harness.lines(worker)


def _parent(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(ln for ln in status.splitlines() if ln.startswith("PPid:")).split()[1])


async def test_a_forked_worker_gets_its_sigterm_grace_and_is_killed_after_it(
    harness: Harness,
) -> None:
    await harness.warm(harness.launch([sys.executable, str(harness.script(_REPORT))]))
    graceful = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('term', flush=True), sys.exit(3)))\n"
        "print('up', flush=True)\ntime.sleep(60)\n"
    )
    code, lines = await _stopped(harness, graceful, "graceful.py", grace=10)
    assert code == 3
    assert "term" in lines
    stubborn = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('up', flush=True)\ntime.sleep(60)\n"
    )
    code, _ = await _stopped(harness, stubborn, "stubborn.py", grace=0.5)
    assert code == -signal.SIGKILL


async def test_workers_die_with_their_zygote_and_are_reported_killed(harness: Harness) -> None:
    script = harness.script("import time\nprint('up', flush=True)\ntime.sleep(60)\n")
    first = harness.launch([sys.executable, str(script)])
    await harness.provider.start(first)
    plan = forkable(first)
    assert plan is not None and harness.provider.fork_servers is not None
    servers = harness.provider.fork_servers
    await asyncio.to_thread(eventually, lambda: servers.ready(plan.key), "the zygote")
    forked = harness.launch([sys.executable, str(script)])
    await harness.provider.start(forked)
    await asyncio.to_thread(eventually, lambda: "up" in harness.lines(forked), "up")
    await servers.close()
    await asyncio.to_thread(eventually, lambda: forked.worker_id in harness.exits.codes, "exit")
    assert harness.exits.codes[forked.worker_id] == -signal.SIGKILL
    assert first.worker_id not in harness.exits.codes, "a plain worker is not the zygote's"


async def test_an_interpreter_that_cannot_import_the_sdk_keeps_starting_workers_plainly(
    harness: Harness,
) -> None:
    broken = harness.tmp / "broken"
    broken.mkdir()
    (broken / "runpod.py").write_text("raise ImportError('no SDK here')\n")
    script = harness.script(_REPORT)
    env = {"PYTHONPATH": str(broken)}
    for _ in range(3):
        launch = harness.launch([sys.executable, str(script)], env)
        assert await harness.run(launch) == 0
        assert harness.report(launch)["ppid"] == os.getpid()


@pytest.mark.parametrize(
    "argv",
    [
        ["python3", "-m", "handler"],
        ["python3", "-c", "print(1)"],
        ["bash", "handler.py"],
        ["python3", "-O", "handler.py"],
        ["python3", "handler.sh"],
        ["python3"],
    ],
)
def test_only_a_python_script_comes_from_a_zygote(argv: list[str], tmp_path: Path) -> None:
    launch = Launch("w", "e", argv, dict(os.environ), tmp_path)
    assert forkable(launch) is None


def test_a_python_script_comes_from_the_zygote_of_its_interpreter_and_python_environment(
    tmp_path: Path,
) -> None:
    env = dict(os.environ) | {"PYTHONPATH": "/opt/lib", "PYTHONUNBUFFERED": "1"}
    plan = forkable(Launch("w", "e", ["python3", "-u", "h.py", "a"], env, tmp_path))
    assert plan is not None
    assert plan.argv == ["h.py", "a"] and plan.unbuffered
    assert os.path.isabs(plan.key.interpreter)
    assert ("PYTHONPATH", "/opt/lib") in plan.key.python_env
    assert all(k != "PYTHONUNBUFFERED" for k, _ in plan.key.python_env)
