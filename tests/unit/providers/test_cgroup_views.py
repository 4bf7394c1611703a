"""What a sandbox shows of the host's cgroups (``cgroups.view``, bubblewrap's ``_sys_args``),
against stand-ins shaped as ``/proc/self`` and the hierarchies: cgroup v2 with its controllers
cannot be mounted on this project's machines (``test_cgroup_discovery.py`` says why); the real
kernel's v1 is in ``tests/integration/providers/test_cgroup_view.py``."""

from __future__ import annotations

from pathlib import Path

from skiff.providers import bubblewrap
from skiff.providers.cgroups import (
    CGROUP_MOUNTS,
    Caps,
    Cgroups,
    Group,
    Shown,
    View,
    view,
)


def _proc(tmp_path: Path, mountinfo: str, cgroup: str) -> Path:
    proc = tmp_path / "proc"
    (proc / "ns").mkdir(parents=True)
    (proc / "mountinfo").write_text(mountinfo)
    (proc / "cgroup").write_text(cgroup)
    (proc / "ns" / "cgroup").write_text("")  # not the host's first namespace
    return proc


def test_v2_shows_the_workers_own_group_at_the_trees_mount_point(tmp_path: Path) -> None:
    root = tmp_path / "fs"
    own = root / "system.slice" / "skiff.service"
    base = own / "skiff-s1"
    group = Group([base / "w1.1"])
    group.dirs[0].mkdir(parents=True)
    (base / "w2.1").mkdir()
    mounts = f"30 23 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    proc = _proc(tmp_path, mounts, "0::/system.slice/skiff.service/skiff-server\n")
    seen = view(group, [base], proc)
    assert seen.shown == (Shown(base / "w1.1", root),)
    assert seen.covered == (CGROUP_MOUNTS, root)
    # Without a group, nothing of skiff's tree; the server's own group holds skiff's.
    assert view(None, [base], proc).shown == ()


def test_v1_shows_skiffs_hierarchies_as_the_group_and_others_as_the_servers_leaf(
    tmp_path: Path,
) -> None:
    root = tmp_path / "fs"
    for d in ("memory/skiff-s1/w1.1", "pids/skiff-s1/w1.1", "cpuset/svc", "blkio/svc/child"):
        (root / d).mkdir(parents=True)
    mounts = "".join(
        f"{n} 31 0:{n} / {root}/{name} rw - cgroup cgroup rw,{name}\n"
        for n, name in enumerate(["memory", "pids", "cpuset", "blkio", "devices"], 40)
    )
    proc = _proc(
        tmp_path, mounts, "1:memory:/\n2:pids:/\n3:cpuset:/svc\n4:blkio:/svc\n5:devices:/\n"
    )
    group = Group([root / "memory/skiff-s1/w1.1", root / "pids/skiff-s1/w1.1"])
    bases = [root / "memory/skiff-s1", root / "pids/skiff-s1"]
    seen = view(group, bases, proc)
    assert seen.shown == (
        Shown(root / "memory/skiff-s1/w1.1", root / "memory"),
        Shown(root / "pids/skiff-s1/w1.1", root / "pids"),
        # The server's own group where skiff makes none, a leaf: a JVM finds cpuset there.
        Shown(root / "cpuset/svc", root / "cpuset"),
        # Not blkio's: the server's group there holds another; not devices': its root.
    )


def test_the_hosts_root_group_is_never_shown(tmp_path: Path) -> None:
    root = tmp_path / "fs"
    (root / "cpuset").mkdir(parents=True)
    mounts = f"40 31 0:40 / {root}/cpuset rw - cgroup cgroup rw,cpuset\n"
    proc = _proc(tmp_path, mounts, "3:cpuset:/\n")
    (proc / "ns" / "cgroup").unlink()
    # Where it cannot tell its namespace, it shows nothing.
    assert view(None, [], proc) == View((CGROUP_MOUNTS,), ())


def test_a_forked_workers_group_is_made_within_its_zygotes_settled_parent(tmp_path: Path) -> None:
    """v2: the zygote joins the parent at its start, and is moved into its own leaf before the
    parent hands its controllers down (a v2 group holding processes may not)."""
    root = tmp_path / "fs"
    own = root / "svc"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.procs").write_text("")
    mounts = f"30 23 0:26 / {root} rw - cgroup2 cgroup2 rw\n"
    proc = _proc(tmp_path, mounts, "0::/svc\n")
    made = Cgroups.open("s1", proc)
    assert isinstance(made, Cgroups)
    parent = made.make_parent("forks.1")
    assert parent.dirs == [own / "skiff-s1" / "forks.1"]
    (parent.dirs[0] / "cgroup.procs").write_text("")  # the kernel's: its processes moved
    zygote = made.settle(parent, "zygote.2", Caps(pids=64, memory_bytes=1 << 30))
    assert zygote.dirs == [parent.dirs[0] / "zygote.2"]
    assert (parent.dirs[0] / "cgroup.subtree_control").read_text() == "+pids +memory +cpu"
    assert (zygote.dirs[0] / "memory.max").read_text() == str(1 << 30)
    worker = made.make("w1.3", Caps(pids=64), under=parent)
    assert worker.dirs == [parent.dirs[0] / "w1.3"]
    assert (worker.dirs[0] / "pids.max").read_text() == "64"
    assert made.view(worker, proc).shown == (Shown(worker.dirs[0], root),)
    # The zygote's sandbox shows the parent: its workers' groups appear in it as they come.
    assert made.view(parent, proc).shown == (Shown(parent.dirs[0], root),)


def _sys(root: Path) -> None:
    (root / "sys" / "block").mkdir(parents=True)
    (root / "sys" / "fs" / "bpf").mkdir(parents=True)
    cgroup = root / "sys" / "fs" / "cgroup"
    (cgroup / "cpu,cpuacct").mkdir(parents=True)
    (cgroup / "memory").mkdir()
    (cgroup / "cpu").symlink_to("cpu,cpuacct")


def _pairs(args: list[str], flag: str) -> list[tuple[str, str]]:
    return [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == flag]


def test_sys_is_made_anew_without_the_hosts_cgroups_and_shows_the_view(tmp_path: Path) -> None:
    _sys(tmp_path)
    sandbox = bubblewrap.Sandbox("/usr/bin/bwrap", (), root=tmp_path, tmp=tmp_path / "tmp")
    own = Path("/sys/fs/cgroup/memory/skiff-s1/w1.1")
    shown = View((CGROUP_MOUNTS, CGROUP_MOUNTS / "memory"), (Shown(own, CGROUP_MOUNTS / "memory"),))
    args = sandbox.command(["true"], home=tmp_path, cwd=tmp_path, env={}, cgroups=shown)
    binds = _pairs(args, "--ro-bind-try")
    # Never /sys, /sys/fs or the cgroups bound whole (a bind brings every mount below it).
    assert ("/sys", "/sys") not in binds and ("/sys/fs", "/sys/fs") not in binds
    assert not any(src.startswith("/sys/fs/cgroup") and src == dst for src, dst in binds)
    assert ("/sys/block", "/sys/block") in binds and ("/sys/fs/bpf", "/sys/fs/bpf") in binds
    assert (str(own), "/sys/fs/cgroup/memory") in binds
    tmpfs = [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"]
    assert {"/sys", "/sys/fs", "/sys/fs/cgroup"} <= set(tmpfs)
    assert ("cpu,cpuacct", "/sys/fs/cgroup/cpu") in _pairs(args, "--symlink")
    remounted = [args[i + 1] for i, a in enumerate(args) if a == "--remount-ro"]
    assert remounted[-3:] == ["/sys/fs/cgroup", "/sys/fs", "/sys"]
    assert args.index(str(own)) < args.index("--remount-ro")


def test_by_default_the_sandbox_shows_no_cgroup(tmp_path: Path) -> None:
    _sys(tmp_path)
    sandbox = bubblewrap.Sandbox("/usr/bin/bwrap", (), root=tmp_path, tmp=tmp_path / "tmp")
    args = sandbox.command(["true"], home=tmp_path, cwd=tmp_path, env={})
    assert not any(src.startswith("/sys/fs/cgroup") for src, _ in _pairs(args, "--ro-bind-try"))
    assert "/sys/fs/cgroup" in [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"]


def test_v2_shown_at_the_usual_place_is_bound_there_directly(tmp_path: Path) -> None:
    _sys(tmp_path)
    sandbox = bubblewrap.Sandbox("/usr/bin/bwrap", (), root=tmp_path, tmp=tmp_path / "tmp")
    own = Path("/sys/fs/cgroup/svc/skiff-s1/w1.1")
    shown = View((CGROUP_MOUNTS,), (Shown(own, CGROUP_MOUNTS),))
    args = sandbox.command(["true"], home=tmp_path, cwd=tmp_path, env={}, cgroups=shown)
    assert (str(own), "/sys/fs/cgroup") in _pairs(args, "--ro-bind-try")
    assert "/sys/fs/cgroup" not in [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"]
