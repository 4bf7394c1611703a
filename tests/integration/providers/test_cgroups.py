"""Local workers in cgroups of their own (providers/cgroups.py), on the real kernel with real
bubblewrap and real processes: a fork bomb stops at the worker's process cap, a runaway
allocation ends the worker alone, what a worker started outside its process group ends with it,
a worker forked from its endpoint's zygote is in its group before its script runs, a session in
a pod runs within the pod's caps, and what a killed server left is removed by the next one.

Where this host lets the server make no cgroup (not root, no delegated subtree) these tests
are skipped: the caps then do not exist, and the server says so at start."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import sys
import uuid
from pathlib import Path

import pytest

from eventually import eventually_async
from process_exits import Exits
from skiff.domain.pod_sessions import EntryRequest
from skiff.providers import bubblewrap, fork_server
from skiff.providers.base import Launch, PodLaunch
from skiff.providers.cgroups import ZYGOTE_MEMORY_BYTES, Caps, Cgroups, Group
from skiff.providers.local import LocalProvider
from skiff.providers.local_pods import LocalPodProvider
from skiff.services.logs import WorkerLogs

pytestmark = [
    pytest.mark.skipif(bubblewrap.executable() is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(sys.platform != "linux", reason="cgroups are Linux's"),
]

PIDS = 64
MIB = 1 << 20

_PROBE = """\
import json, os, subprocess, sys, time
mode = sys.argv[1]
def report(**fields):
    print("REPORT " + json.dumps(fields), flush=True)
if mode == "cgroup":
    report(cgroup=open("/proc/self/cgroup").read())
elif mode == "fork":
    started, refused = [], None
    for _ in range(4 * int(os.environ["PIDS_CAP"])):
        try:
            started.append(subprocess.Popen(["sleep", "30"]))
        except OSError as exc:
            refused = exc.errno
            break
    report(started=len(started), refused=refused)
    for p in started:
        p.kill()
elif mode == "memory":
    held = []
    for n in range(64):
        held.append(b"x" * (16 << 20))
        print("holding", (n + 1) * 16, "MiB", flush=True)
    report(survived=True)
elif mode == "leave":
    moved = []
    for folder, _dirs, files in os.walk("/sys/fs/cgroup"):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(folder, "cgroup.procs"), "w") as procs:
                    procs.write(str(os.getpid()))
                moved.append(folder)
            except OSError:
                pass
    report(moved=moved)
    time.sleep(60)
elif mode == "escape":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(120)
        os._exit(0)
    os.wait()
    report(escaped=True)
    time.sleep(120)
"""


class Box:
    def __init__(self, tmp_path: Path, cgroups: Cgroups) -> None:
        self.data = tmp_path / "data"
        self.data.mkdir()
        self.script = tmp_path / "app" / "probe.py"
        self.script.parent.mkdir()
        self.script.write_text(_PROBE)
        self.exits = Exits()
        self.logs = WorkerLogs(self.data, 1 << 20, 1)
        sandbox = bubblewrap.Sandbox.for_server(
            self.data, volumes_dir=self.data / "volumes", database_file=self.data / "skiff.db"
        )
        self.provider = LocalProvider(
            self.exits, logs=self.logs.sink, sandbox=sandbox, cgroups=cgroups, pids_limit=PIDS
        )
        self.count = 0

    def launch(self, mode: str, **more: object) -> Launch:
        self.count += 1
        worker_id = f"w{self.count}"
        homes = self.data / "workers" / "ep1"
        home = homes / worker_id / "home"
        return Launch(
            worker_id=worker_id,
            endpoint_id="ep1",
            argv=[sys.executable, str(self.script), mode],
            env=dict(os.environ)
            | {"RUNPOD_POD_ID": worker_id, "HOME": str(home), "PIDS_CAP": str(PIDS)},
            home=home,
            homes=homes,
            **more,  # type: ignore[arg-type]
        )

    def log(self, worker_id: str) -> str:
        return self.logs.log_path("ep1", worker_id).read_text()

    def report(self, worker_id: str) -> dict[str, object]:
        [line] = [line for line in self.log(worker_id).splitlines() if "REPORT " in line]
        return dict(json.loads(line.split("REPORT ", 1)[1]))

    async def run(self, launch: Launch) -> int:
        await self.provider.start(launch)
        await eventually_async(lambda: launch.worker_id in self.exits.codes, "the exit")
        return self.exits.codes[launch.worker_id]


@pytest.fixture
async def box(tmp_path: Path, cgroups: Cgroups) -> object:
    made = Box(tmp_path, cgroups)
    yield made
    await made.provider.stop_all(1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_a_fork_bomb_stops_at_the_workers_process_cap(box: Box) -> None:
    launch = box.launch("fork")
    assert await box.run(launch) == 0, box.log(launch.worker_id)
    assert "[skiff]" not in box.log(launch.worker_id)
    report = box.report(launch.worker_id)
    # The cap counts the sandbox's own processes and the interpreter's threads too.
    assert report["refused"] is not None, report
    assert 0 < int(str(report["started"])) < PIDS


async def test_a_runaway_allocation_ends_the_worker_alone(box: Box) -> None:
    launch = box.launch("memory", memory_bytes=128 * MIB)
    code = await box.run(launch)
    log = box.log(launch.worker_id)
    # Ended by the kernel within its 128 MiB, long before the 1 GiB it asked for.
    assert code != 0, log
    assert "REPORT" not in log
    assert "holding 16 MiB" in log and "holding 256 MiB" not in log
    # Its log says why, where a bare SIGKILL would leave its owner guessing.
    assert "[skiff] ended by the kernel: it went over its memory cap of 0.12 GiB" in log


async def test_what_a_worker_started_outside_its_process_group_ends_with_it(box: Box) -> None:
    launch = box.launch("escape")
    await box.provider.start(launch)
    await eventually_async(lambda: "REPORT" in box.log(launch.worker_id), "the escape")
    group = box.provider._groups[launch.worker_id]
    held = group.pids()
    # bwrap, the worker and the one that left its session (and the worker's group) behind.
    assert len(held) >= 3, held
    await box.provider.stop(launch.worker_id, 1)
    await eventually_async(lambda: launch.worker_id in box.exits.codes, "the exit")
    await eventually_async(lambda: not any(_alive(p) for p in held), "every process to end")
    assert not any(d.exists() for d in group.dirs)


async def test_a_forked_worker_is_in_its_group_before_its_script_runs(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fork_server, "SANDBOXED_START_SECONDS", 0.0)
    first = box.launch("cgroup")
    assert await box.run(first) == 0
    servers = box.provider.fork_servers
    assert servers is not None
    await eventually_async(
        lambda: any(k.sandbox is not None and servers.ready(k) for k in servers._zygotes),
        "the endpoint's zygote",
    )
    forked = box.launch("cgroup")
    pid = await box.provider.start(forked)
    assert pid in {c.pid for z in servers._zygotes.values() for c in z._children.values()}
    await eventually_async(lambda: forked.worker_id in box.exits.codes, "the exit")
    # Seen from inside (its sandbox's cgroup namespace is the zygote's): below it, in a group
    # named for the worker, as its script's first line found it.
    seen = str(box.report(forked.worker_id)["cgroup"])
    pids_line = next(line for line in seen.splitlines() if ":pids:" in line or line[:3] == "0::")
    assert f"/{forked.worker_id}." in pids_line, seen


async def test_a_zygote_runs_in_a_capped_group_of_its_own_removed_when_it_ends(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zygote runs the worker's interpreter, whatever that runs at its start included: it is
    capped as a worker is, and its group goes with it."""
    monkeypatch.setattr(fork_server, "SANDBOXED_START_SECONDS", 0.0)
    assert await box.run(box.launch("cgroup")) == 0
    servers = box.provider.fork_servers
    assert servers is not None
    await eventually_async(
        lambda: any(k.sandbox is not None and servers.ready(k) for k in servers._zygotes),
        "the endpoint's zygote",
    )
    [zygote] = [z for k, z in servers._zygotes.items() if k.sandbox is not None]
    group = zygote.group
    assert group is not None
    assert zygote._proc is not None and zygote._proc.pid in group.pids()
    assert "zygote." in group.dirs[0].name
    wanted = {"pids.max", "memory.max", "memory.limit_in_bytes"}
    caps = {
        f.name: f.read_text().strip() for d in group.dirs for f in d.iterdir() if f.name in wanted
    }
    assert caps["pids.max"] == str(PIDS)
    assert str(ZYGOTE_MEMORY_BYTES) in (caps.get("memory.max"), caps.get("memory.limit_in_bytes"))

    await servers.close()
    assert zygote.group is None
    assert not any(d.exists() for d in group.dirs)


async def test_without_a_group_for_it_no_zygote_starts_and_workers_start_plainly(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fork_server, "SANDBOXED_START_SECONDS", 0.0)
    servers = box.provider.fork_servers
    assert servers is not None

    class Refused:
        def own(self) -> Group:
            raise OSError(28, "No space left on device")

        def parent(self) -> Group:
            raise OSError(28, "No space left on device")

        def settle(self, parent: Group) -> Group:
            raise OSError(28, "No space left on device")

    servers._starts_with = dataclasses.replace(servers._starts_with, groups=Refused())
    assert await box.run(box.launch("cgroup")) == 0
    await eventually_async(
        lambda: any(z.failed_at is not None for z in servers._zygotes.values()),
        "the zygote's start to fail",
    )
    assert not any(servers.ready(k) for k in servers._zygotes)
    # The next worker starts the plain way, in its own group (its cgroup namespace's root).
    second = box.launch("cgroup")
    await box.provider.start(second)
    assert second.worker_id in box.provider._groups
    assert not any(z._children for z in servers._zygotes.values())
    await eventually_async(lambda: second.worker_id in box.exits.codes, "the exit")
    assert box.exits.codes[second.worker_id] == 0


async def test_a_worker_whose_group_cannot_be_joined_does_not_start(box: Box) -> None:
    launch = box.launch("cgroup")
    made = box.provider._cgroups
    assert made is not None

    class Gone(Cgroups):
        def make(self, key: str, caps: Caps) -> object:  # type: ignore[override]
            group = made.make(key, caps)
            group.remove()  # made, then gone before the worker joins it
            return group

    box.provider._cgroups = Gone(made._hierarchies)
    assert await box.run(launch) != 0
    log = box.log(launch.worker_id)
    assert "could not join the cgroup" in log and "REPORT" not in log


def test_a_restarted_server_removes_the_groups_its_last_run_left(cgroups: Cgroups) -> None:
    left = cgroups.make("w1.1", Caps(pids=PIDS))
    assert all(d.is_dir() for d in left.dirs)
    again = Cgroups.open(left.dirs[0].parent.name.removeprefix("skiff-"))
    assert isinstance(again, Cgroups)
    # Opened, as a second server started by mistake on the same data directory opens them
    # before it finds the directory taken: the running server's groups are left alone.
    assert all(d.is_dir() for d in left.dirs)
    # Its first worker's group is made once the server runs: what the last run left goes.
    again.make("w2.1", Caps(pids=PIDS)).remove()
    assert not any(d.exists() for d in left.dirs)


def test_caps_are_written_where_the_kernel_reads_them(cgroups: Cgroups) -> None:
    group = cgroups.make("w1.1", Caps(pids=PIDS, memory_bytes=256 * MIB, vcpus=1))
    try:
        wanted = {"pids.max", "memory.max", "cpu.max", "memory.limit_in_bytes", "cpu.cfs_quota_us"}
        files = {
            f.name: f.read_text().strip()
            for d in group.dirs
            for f in d.iterdir()
            if f.name in wanted
        }
        assert files["pids.max"] == str(PIDS)
        if "memory.max" in files:  # cgroup v2
            assert files["memory.max"] == str(256 * MIB)
            assert files["cpu.max"] == "100000 100000"
        else:
            assert files["memory.limit_in_bytes"] == str(256 * MIB)
            assert files["cpu.cfs_quota_us"] == "100000"
    finally:
        group.remove()


async def test_a_session_in_a_pod_runs_within_the_pods_caps(
    tmp_path: Path, cgroups: Cgroups
) -> None:
    data = tmp_path / "data"
    home = data / "pods" / "pod-1"
    home.mkdir(parents=True)
    sandbox = bubblewrap.Sandbox.for_server(
        data, volumes_dir=data / "volumes", database_file=data / "skiff.db"
    )
    logs = WorkerLogs(data, folder="pod-logs")
    provider = LocalPodProvider(
        Exits(), logs=logs.sink, sandbox=sandbox, cgroups=cgroups, pids_limit=PIDS
    )
    await provider.start(
        PodLaunch(
            pod_id="pod-1",
            version=1,
            image="local/python",
            entrypoint=[],
            command=[sys.executable, "-c", "import time; time.sleep(600)"],
            env={"PATH": os.environ["PATH"]},
            ports=(),
            volume=None,
            mount_path="/workspace",
            home=home,
        )
    )
    try:
        group = provider._processes._groups["pod-1"]
        alone = group.pids()
        entry = await provider.enter("pod-1", EntryRequest("echo in; sleep 60"))
        assert await entry.read_output() == b"in\n"
        # The session's sandbox, shell and sleep count against the pod's cap, and end with it.
        assert len(group.pids() - alone) >= 2
    finally:
        await provider.close()
    assert not any(d.exists() for d in group.dirs)


def test_groups_made_at_once_as_the_first_ones_are_not_swept_away(cgroups: Cgroups) -> None:
    # Workers started together make their groups in threads at the same moment; the sweep of
    # what an earlier run left, done by the first, must not take the others' fresh groups.
    left = [cgroups.make(f"left.{n}", Caps(pids=PIDS)) for n in range(40)]
    name = left[0].dirs[0].parent.name.removeprefix("skiff-")
    fresh = Cgroups.open(name)
    assert isinstance(fresh, Cgroups)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        groups = list(pool.map(lambda n: fresh.make(f"w{n}.1", Caps(pids=PIDS)), range(8)))
    try:
        assert all(d.is_dir() for g in groups for d in g.dirs)
        assert not any(d.exists() for g in left for d in g.dirs)
    finally:
        for group in groups:
            group.remove()


def test_a_server_that_ended_its_workers_makes_groups_again(cgroups: Cgroups) -> None:
    # A replica that lost the lead ended its workers (and closed its groups' directory); when
    # it leads again, its workers' groups are made as before.
    cgroups.make("w1.1", Caps(pids=PIDS)).remove()
    cgroups.close()
    again = cgroups.make("w2.1", Caps(pids=PIDS))
    try:
        assert all(d.is_dir() for d in again.dirs)
    finally:
        again.remove()


def test_opening_the_groups_leaves_nothing_behind(cgroups: Cgroups) -> None:
    name = f"test-{uuid.uuid4().hex[:12]}"
    opened = Cgroups.open(name)
    assert isinstance(opened, Cgroups)
    # Every test server, and a second server started by mistake, opens them.
    assert not any(h.base.exists() for h in opened._hierarchies.values())


async def test_a_worker_cannot_move_itself_out_of_its_group(box: Box) -> None:
    launch = box.launch("leave")
    await box.provider.start(launch)
    await eventually_async(lambda: "REPORT" in box.log(launch.worker_id), "the attempt")
    # Its sandbox sees the cgroup files read-only: every write was refused, and it is still
    # counted where the server put it.
    assert box.report(launch.worker_id)["moved"] == []
    assert len(box.provider._groups[launch.worker_id].pids()) >= 2
    await box.provider.stop(launch.worker_id, 1)
