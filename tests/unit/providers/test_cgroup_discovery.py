"""How ``providers/cgroups.py`` finds where a server's groups go and writes their caps.

The integration tests (``tests/integration/providers/test_cgroups.py``) run the real kernel,
which on this project's machines is cgroup v1 with an empty v2 tree beside it. cgroup v2 with
its controllers cannot be mounted there, so its path is checked here against a stand-in: plain
directories and files shaped as ``/proc/self`` and a v2 tree are. They show which files are
read and written, not what the kernel does with them."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from skiff.providers.cgroups import Caps, Cgroups, _find

V1_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {root}/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:31 / {root}/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:35 / {root}/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:37 / {root}/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_OWN = "8:pids:/\n4:memory:/service/a\n1:cpu:/\n0::/\n"


def _proc(tmp_path: Path, mountinfo: str, cgroup: str) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(mountinfo)
    (proc / "cgroup").write_text(cgroup)
    return proc


def test_v1_puts_each_controller_under_the_servers_own_group_in_its_tree(tmp_path: Path) -> None:
    root = tmp_path / "fs"
    (root / "unified").mkdir(parents=True)
    (root / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    proc = _proc(tmp_path, V1_MOUNTS.format(root=root), V1_OWN)
    assert _find(proc) == {
        "pids": (root / "pids", False),
        "memory": (root / "memory" / "service" / "a", False),
        "cpu": (root / "cpu", False),
    }


def _v2_tree(tmp_path: Path, processes: list[int]) -> tuple[Path, Path]:
    root = tmp_path / "fs"
    own = root / "system.slice" / "skiff.service"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma\n")
    (own / "cgroup.procs").write_text("".join(f"{p}\n" for p in processes))
    mounts = f"30 23 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    proc = _proc(tmp_path, mounts, "0::/system.slice/skiff.service\n")
    return proc, own


def test_v2_hands_its_controllers_down_and_writes_v2_caps(tmp_path: Path) -> None:
    proc, own = _v2_tree(tmp_path, [])
    assert _find(proc) == {c: (own, True) for c in ("pids", "memory", "cpu")}
    made = Cgroups.open("s1", proc)
    assert isinstance(made, Cgroups)
    assert (own / "cgroup.subtree_control").read_text() == "+pids +memory +cpu"
    base = own / "skiff-s1"
    # Made with the first worker's group, not when opened.
    assert not base.exists()
    group = made.make("w1.1", Caps(pids=100, memory_bytes=1 << 30, vcpus=2))
    assert (base / "cgroup.subtree_control").read_text() == "+pids +memory +cpu"
    # One directory in the one tree, every cap in it.
    assert group.dirs == [base / "w1.1"]
    assert group.procs_files == [base / "w1.1" / "cgroup.procs"]
    assert (base / "w1.1" / "pids.max").read_text() == "100"
    assert (base / "w1.1" / "memory.max").read_text() == str(1 << 30)
    assert (base / "w1.1" / "cpu.max").read_text() == "200000 100000"
    # No swap file in this stand-in: a setting the kernel lacks is left out, not an error.
    assert not (base / "w1.1" / "memory.swap.max").exists()


def _refuse_handing_down(
    monkeypatch: pytest.MonkeyPatch, control: Path, times: int | None = None
) -> None:
    """The kernel's refusal (EBUSY) to hand controllers down from a group with processes in
    it, ``times`` times (None: always)."""
    original = Path.write_text
    left = [times]

    def write_text(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if self == control and (left[0] is None or left[0] > 0):
            if left[0] is not None:
                left[0] -= 1
            raise OSError(errno.EBUSY, "Device or resource busy")
        return original(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)


def test_v2_moves_the_server_alone_into_a_leaf_before_handing_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, own = _v2_tree(tmp_path, [os.getpid()])
    _refuse_handing_down(monkeypatch, own / "cgroup.subtree_control", times=1)
    made = Cgroups.open("s1", proc)
    assert isinstance(made, Cgroups)
    assert (own / "skiff-server" / "cgroup.procs").read_text() == str(os.getpid())
    assert (own / "cgroup.subtree_control").read_text() == "+pids +memory +cpu"


def test_v2_never_moves_another_programs_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, own = _v2_tree(tmp_path, [os.getpid(), 1])
    _refuse_handing_down(monkeypatch, own / "cgroup.subtree_control")
    made = Cgroups.open("s1", proc)
    assert isinstance(made, str)
    assert "holds other processes" in made
    assert not (own / "skiff-server").exists()


def test_a_host_without_a_controller_says_which(tmp_path: Path) -> None:
    root = tmp_path / "fs"
    mounts = f"39 31 0:35 / {root}/pids rw,relatime - cgroup cgroup rw,pids\n"
    proc = _proc(tmp_path, mounts, "8:pids:/\n")
    made = Cgroups.open("s1", proc)
    assert made == "no cgroup controller memory, cpu is mounted for this server's use"
