"""What a sandboxed worker or pod sees of cgroups (providers/cgroups.py ``View``,
providers/bubblewrap.py), on the real kernel with real bubblewrap and real processes: no other
worker's or tenant's group, and its own limits where libraries look for them (a JVM, Go's
automaxprocs, a thread pool's sizing: ``/proc/self/cgroup`` and the mount's root in
``/proc/self/mountinfo``, or the hierarchy's usual place when its own group is mounted there).

Where this host lets the server make no cgroup the tests that need groups are skipped, as in
``test_cgroups.py``."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from eventually import eventually_async
from process_exits import Exits
from skiff.providers import bubblewrap, fork_server
from skiff.providers.base import Launch, PodLaunch
from skiff.providers.cgroups import Caps, Cgroups, Group
from skiff.providers.local import LocalProvider
from skiff.providers.local_pods import LocalPodProvider
from skiff.services.logs import WorkerLogs

pytestmark = [
    pytest.mark.skipif(bubblewrap.executable() is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(sys.platform != "linux", reason="cgroups are Linux's"),
]

PIDS = 64
MIB = 1 << 20

#: What a library does to find its own limits: the hierarchy's mount from mountinfo, the
#: process's path in it from /proc/self/cgroup, the path made relative to the mount's root.
_PROBE = """\
import json, os, sys, time
def unescape(text):
    return text.replace("\\\\040", " ")
mounts = []
for line in open("/proc/self/mountinfo"):
    fields, after = line.split(" - ", 1)
    fields, after = fields.split(), after.split()
    mounts.append((after[0], set(after[2].split(",")), fields[3], unescape(fields[4])))
own = {}
for line in open("/proc/self/cgroup"):
    number, listed, path = line.rstrip("\\n").split(":", 2)
    for name in (listed.split(",") if listed else [""]):
        own[name] = path
def derived(controller):
    for fstype, options, root, point in mounts:
        v2 = fstype == "cgroup2" and controller not in own
        if (fstype == "cgroup" and controller in options) or v2:
            path = own["" if v2 else controller]
            if root != "/" and path.startswith(root):
                path = path[len(root):]
            elif root != "/":
                return None
            return point + path if path != "/" else point
    return None
def read(folder, *names):
    for name in names:
        try:
            return open(os.path.join(folder, name)).read().split()[0]
        except (OSError, TypeError):
            continue
    return None
seen = []
for folder, dirs, files in os.walk("/sys/fs/cgroup"):
    seen.append(folder)
def usage(folder):
    return read(folder, "memory.usage_in_bytes", "memory.current")
memory, pids = derived("memory"), derived("pids")
others = [f for f in seen if any(name in f for name in sys.argv[1:])]
print("REPORT " + json.dumps({
    "cgroup": open("/proc/self/cgroup").read(),
    "memory_dir": memory,
    "memory": read(memory, "memory.max", "memory.limit_in_bytes"),
    "pids": read(pids, "pids.max"),
    "fixed_memory": read("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
    or read("/sys/fs/cgroup", "memory.max"),
    "fixed_pids": read("/sys/fs/cgroup/pids", "pids.max") or read("/sys/fs/cgroup", "pids.max"),
    "others": others,
    "others_usage": [usage(f) for f in others],
    "skiff": [f for f in seen if "skiff-" in f],
    "mounts": [m[3] for m in mounts if m[0].startswith("cgroup")],
    "roots": [m[2] for m in mounts if m[0].startswith("cgroup")],
    "groups": sorted({os.path.basename(f) for f in seen if f.count("/") > 4}),
}), flush=True)
if os.environ.get("LINGER"):
    time.sleep(120)
"""


class Box:
    def __init__(self, tmp_path: Path, cgroups: Cgroups | None) -> None:
        self.data = tmp_path / "data"
        self.data.mkdir()
        self.script = tmp_path / "app" / "probe.py"
        self.script.parent.mkdir()
        self.script.write_text(_PROBE)
        self.exits = Exits()
        self.logs = WorkerLogs(self.data, 1 << 20, 1)
        self.sandbox = bubblewrap.Sandbox.for_server(
            self.data, volumes_dir=self.data / "volumes", database_file=self.data / "skiff.db"
        )
        self.provider = LocalProvider(
            self.exits, logs=self.logs.sink, sandbox=self.sandbox, cgroups=cgroups, pids_limit=PIDS
        )
        self.count = 0

    def launch(self, *others: str, endpoint_id: str = "ep1", **more: object) -> Launch:
        self.count += 1
        worker_id = f"w{self.count}x"
        homes = self.data / "workers" / endpoint_id
        home = homes / worker_id / "home"
        env = dict(os.environ) | {"RUNPOD_POD_ID": worker_id, "HOME": str(home)}
        return Launch(
            worker_id=worker_id,
            endpoint_id=endpoint_id,
            argv=[sys.executable, str(self.script), *others],
            env=env | ({"LINGER": "1"} if more.pop("linger", False) else {}),
            home=home,
            homes=homes,
            memory_bytes=256 * MIB,
            **more,  # type: ignore[arg-type]
        )

    def log(self, launch: Launch) -> str:
        return self.logs.log_path(launch.endpoint_id, launch.worker_id).read_text()

    def report(self, launch: Launch) -> dict[str, object]:
        [line] = [line for line in self.log(launch).splitlines() if "REPORT " in line]
        return dict(json.loads(line.split("REPORT ", 1)[1]))

    async def run(self, launch: Launch) -> dict[str, object]:
        await self.provider.start(launch)
        await eventually_async(lambda: launch.worker_id in self.exits.codes, "the exit")
        assert self.exits.codes[launch.worker_id] == 0, self.log(launch)
        return self.report(launch)

    async def lingering(self, endpoint_id: str) -> Launch:
        """A worker of another endpoint, running while the others look around."""
        other = self.launch(endpoint_id=endpoint_id, linger=True)
        await self.provider.start(other)
        await eventually_async(lambda: "REPORT" in self.log(other), "the other worker")
        return other

    def group(self, launch: Launch) -> Group:
        return self.provider._groups[launch.worker_id]


@pytest.fixture
async def box(tmp_path: Path, cgroups: Cgroups) -> AsyncIterator[Box]:
    made = Box(tmp_path, cgroups)
    yield made
    await made.provider.stop_all(1)


def _sees_its_own_caps(report: dict[str, object]) -> None:
    assert report["memory"] == str(256 * MIB), report
    assert report["pids"] == str(PIDS), report


async def test_a_worker_sees_no_other_group_and_reads_its_own_caps(box: Box) -> None:
    other = await box.lingering("ep2")
    launch = box.launch(other.worker_id)
    report = await box.run(launch)
    # Nothing of the other tenant's worker: not its group, not its memory use.
    assert report["others"] == [] and report["skiff"] == [], report
    # Its own caps where libraries find them, and at the hierarchy's usual place, where a
    # library that reads a fixed path (joblib's cpu count, Ray's memory) looks.
    _sees_its_own_caps(report)
    assert report["fixed_memory"] == str(256 * MIB) and report["fixed_pids"] == str(PIDS)
    # Its cgroup namespace starts at its own group: no host path is named inside.
    assert set(report["roots"]) == {"/"}, report  # type: ignore[arg-type]
    for line in str(report["cgroup"]).splitlines():
        assert "skiff-" not in line, report


async def test_a_forked_worker_sees_its_endpoints_groups_alone_and_its_own_caps(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fork_server, "SANDBOXED_START_SECONDS", 0.0)
    other = await box.lingering("ep2")
    await box.run(box.launch(other.worker_id))
    servers = box.provider.fork_servers
    assert servers is not None
    await eventually_async(
        lambda: any(
            k.sandbox is not None and Path(k.sandbox.homes).name == "ep1" and servers.ready(k)
            for k in servers._zygotes
        ),
        "the endpoint's zygote",
    )
    forked = box.launch(other.worker_id)
    pid = await box.provider.start(forked)
    assert pid in {c.pid for z in servers._zygotes.values() for c in z._children.values()}
    await eventually_async(lambda: forked.worker_id in box.exits.codes, "the exit")
    report = box.report(forked)
    assert report["others"] == [] and report["skiff"] == [], report
    _sees_its_own_caps(report)
    # Its group lies in its zygote's sandbox's view, named for it, beside its zygote's: the
    # groups of its endpoint's forked workers, no one else's.
    assert f"/{forked.worker_id}." in str(report["memory_dir"]), report
    groups = report["groups"]
    assert isinstance(groups, list) and f"{forked.worker_id}.9" in str(groups), report
    assert all(g.startswith(("zygote.", forked.worker_id)) for g in groups), report
    assert set(report["roots"]) == {"/"}, report  # type: ignore[arg-type]


async def test_a_pod_sees_no_other_group_and_reads_its_own_caps(
    tmp_path: Path, cgroups: Cgroups, box: Box
) -> None:
    other = await box.lingering("ep2")
    data = tmp_path / "pod-data"
    home = data / "pods" / "pod-1"
    home.mkdir(parents=True)
    logs = WorkerLogs(data, folder="pod-logs")
    sandbox = bubblewrap.Sandbox.for_server(
        data, volumes_dir=data / "volumes", database_file=data / "skiff.db"
    )
    exits = Exits()
    provider = LocalPodProvider(
        exits, logs=logs.sink, sandbox=sandbox, cgroups=cgroups, pids_limit=PIDS
    )
    await provider.start(
        PodLaunch(
            pod_id="pod-1",
            version=1,
            image="local/python",
            entrypoint=[],
            command=[sys.executable, str(box.script), other.worker_id],
            env={"PATH": os.environ["PATH"]},
            ports=(),
            volume=None,
            mount_path="/workspace",
            home=home,
            memory_bytes=256 * MIB,
        )
    )
    try:
        await eventually_async(lambda: "pod-1" in exits.codes, "the pod's exit")
        text = logs.log_path("pod-1", "pod-1").read_text()
        [line] = [line for line in text.splitlines() if "REPORT " in line]
        report = json.loads(line.split("REPORT ", 1)[1])
    finally:
        await provider.close()
    assert report["others"] == [] and report["skiff"] == [], report
    _sees_its_own_caps(report)


async def test_without_cgroups_a_worker_sees_no_group_of_the_servers_others(
    tmp_path: Path, cgroups: Cgroups
) -> None:
    """A server that makes no cgroups (off, or not allowed) beside one that does: its workers
    do not see the other server's tenants either."""
    elsewhere = cgroups.make("tenant-b.1", Caps(pids=PIDS))
    try:
        box = Box(tmp_path, None)
        try:
            report = await box.run(box.launch("tenant-b"))
        finally:
            await box.provider.stop_all(1)
    finally:
        elsewhere.remove()
    assert report["others"] == [] and report["skiff"] == [], report


async def test_a_zygote_not_moved_into_its_capped_group_runs_nothing_of_the_tenants(
    box: Box, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its sandbox is made in the group it shows; until the server has moved it into its own
    capped group within, the interpreter that would run the tenant's ``sitecustomize`` waits."""
    monkeypatch.setattr(fork_server, "SANDBOXED_START_SECONDS", 0.0)
    site = tmp_path / "site"
    site.mkdir()
    marker = box.data / "workers" / "ep1" / "zygote-ran"
    (site / "sitecustomize.py").write_text(
        f"import os\nif 'SKIFF_ZYGOTE_FD' in os.environ: open({str(marker)!r}, 'w').close()\n"
    )

    servers = box.provider.fork_servers
    assert servers is not None
    made = servers._starts_with.groups
    assert made is not None

    class Refused:
        own, parent = made.own, made.parent

        def settle(self, parent: Group) -> Group:
            raise OSError(28, "No space left on device")

    servers._starts_with = dataclasses.replace(servers._starts_with, groups=Refused())
    first = box.launch()
    first = dataclasses.replace(first, env=first.env | {"PYTHONPATH": str(site)})
    await box.run(first)
    await eventually_async(
        lambda: any(z.failed_at is not None for z in servers._zygotes.values()),
        "the zygote's start to fail",
    )
    assert not any(servers.ready(k) for k in servers._zygotes)
    assert not marker.exists()
    [zygote] = servers._zygotes.values()
    # Its failure is marked before its end is done (the groups are removed last).
    await eventually_async(
        lambda: zygote.task is not None and zygote.task.done(), "the zygote's end"
    )
    assert zygote.group is None and zygote.parent is None
