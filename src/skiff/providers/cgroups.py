"""Caps on what one process worker or pod may take of the host: its processes, memory and CPU,
through a Linux cgroup of its own.

A container gets these from its runtime (``docker.py``: ``PidsLimit``, memory, ``NanoCpus``); a
worker run as a process had none, so one tenant's fork bomb or runaway allocation could take
the host from every other tenant. Where the server may make cgroups (it runs as root, or in a
subtree delegated to its user), each process worker and pod starts in a group of its own:

- ``pids.max``: ``SKIFF_PROCESS_PIDS_LIMIT`` processes and threads, every worker and pod;
- the memory and CPU quota of a CPU endpoint's worker or a CPU pod, as a container of it gets
  (``domain/containers.py``); a GPU worker's or pod's memory and CPU are not capped, as in a
  container.

The group also ends everything a worker started when the worker is stopped, including a
process that left its process group (``setsid``) to outlive it.

Both hierarchies are handled: cgroup v2 (one tree, ``/sys/fs/cgroup``; where the server's own
group holds processes, the server first moves itself into a leaf of it, ``skiff-server``, as
container runtimes do, since v2 lets only a group without processes hand controllers down) and
v1 (a tree per controller). Groups are made under the server's own group, in a directory named
for its data directory (``skiff-<name>``), which a restarted server empties of what it left
before it makes its first group.

Where none can be made (no write access, a controller missing), processes run uncapped and the
server says so once at start; ``SKIFF_PROCESS_LIMITS=off`` turns the caps off.

A process joins its group before it runs anything of the tenant's: the shim that starts it
(``local.py``) writes its own pid into the group's ``cgroup.procs`` files first, and a worker
forked from a zygote (``fork_server.py``) waits until the server has moved it. A zygote has a
group of its own too, capped at the same number of processes and at ``ZYGOTE_MEMORY_BYTES``:
it runs the worker's interpreter, which a template may name, and with it whatever that
interpreter runs at start (a ``sitecustomize``, a ``.pth`` file of its environment).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: The controllers skiff sets limits through.
CONTROLLERS = ("pids", "memory", "cpu")
#: cgroup v1's CPU period, in µs, against which a quota of ``vcpus`` periods is set.
_CPU_PERIOD_US = 100_000
GIB = 1 << 30
#: How long ``Group.remove`` waits for its killed processes to be gone.
_REMOVE_SECONDS = 5.0
#: The shim's variable naming the ``cgroup.procs`` files to join, one per line (``local.py``);
#: taken out of the environment before the command runs.
CGROUP_ENV = "SKIFF_CGROUP_PROCS"
#: A zygote's memory: an interpreter with the SDK's imports takes about a tenth of this. Its
#: workers' pages are charged to their own groups once they are moved there.
ZYGOTE_MEMORY_BYTES = GIB


@dataclass(frozen=True, slots=True)
class Caps:
    """What one worker or pod may take; None: no cap of that kind."""

    pids: int | None = None
    memory_bytes: int | None = None
    vcpus: int | None = None

    def any(self) -> bool:
        return (self.pids, self.memory_bytes, self.vcpus) != (None, None, None)


@dataclass(frozen=True, slots=True)
class _Hierarchy:
    """Where one controller's groups go: ``base`` (skiff's directory), and whether it is v2."""

    base: Path
    v2: bool


class Group:
    """One worker's or pod's cgroup: a directory per hierarchy (one under v2)."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs

    @property
    def procs_files(self) -> list[Path]:
        """The files a process writes its pid into to join the group (``local.py``'s shim)."""
        return [d / "cgroup.procs" for d in self.dirs]

    def add(self, pid: int) -> None:
        """Move ``pid`` (its threads too) into the group; OSError when it cannot."""
        for procs in self.procs_files:
            procs.write_text(str(pid))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError):
                found |= {int(p) for p in procs.read_text().split()}
        return found

    def memory_exceeded(self) -> str | None:
        """Why the kernel ended processes of the group, in words, where it went over its memory
        cap (cgroup v1's ``memory.oom_control``, v2's ``memory.events``); else None."""
        for d in self.dirs:
            for name, cap_file in (
                ("memory.events", "memory.max"),
                ("memory.oom_control", "memory.limit_in_bytes"),
            ):
                try:
                    counts = dict(line.split() for line in (d / name).read_text().splitlines())
                    cap = int((d / cap_file).read_text().split()[0])
                except (OSError, ValueError):
                    continue
                if int(counts.get("oom_kill", "0")) > 0:
                    return (
                        f"ended by the kernel: it went over its memory cap of {cap / GIB:.2f} GiB "
                        "(a CPU endpoint's or pod's instanceIds or vcpuCount)"
                    )
        return None

    def kill(self) -> None:
        """SIGKILL every process in the group, those that left the worker's process group too."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        """Kill what is left in it and remove it. A directory that still holds a process after
        ``_REMOVE_SECONDS`` stays (the next server start's sweep takes it)."""
        deadline = time.monotonic() + _REMOVE_SECONDS
        for d in self.dirs:
            while True:
                self.kill()
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        log.warning("could not remove the cgroup %s: %s", d, exc)
                        break
                    time.sleep(0.01)


def joining(env: dict[str, str], group: Group | None) -> dict[str, str]:
    """``env`` telling the shim which cgroup to join before it runs the command; with no
    group, telling it none. The shim runs as the server's user, outside the sandbox, and
    writes its pid to every file this names: the name must only ever come from here, never
    from the tenant's own variables (a template's, endpoint's, pod's or session's), which
    ``env`` holds too."""
    own = {name: value for name, value in env.items() if name != CGROUP_ENV}
    if group is None:
        return own
    return own | {CGROUP_ENV: "\n".join(str(p) for p in group.procs_files)}


class Cgroups:
    """Makes the groups of one server, under ``skiff-<name>`` in each hierarchy it uses."""

    def __init__(self, hierarchies: dict[str, _Hierarchy]) -> None:
        self._hierarchies = hierarchies
        self._swept = False
        # ``make`` runs in worker threads, several at once: none may make its group while the
        # first one's sweep is still removing what it finds.
        self._sweeping = threading.Lock()

    @classmethod
    def open(cls, name: str, proc: Path = Path("/proc/self")) -> Cgroups | str:
        """This server's groups; or why none can be made here, in words.

        Opened before the server has claimed its data directory (``skiff serve`` builds its
        services first): a second server started by mistake beside a running one opens the same
        groups, and must not touch them. What an earlier run left is removed at the first
        ``make``, which only a server that runs workers reaches."""
        try:
            found = _find(proc)
        except OSError as exc:
            return f"the cgroup hierarchies could not be read: {exc}"
        missing = [c for c in CONTROLLERS if c not in found]
        if missing:
            return f"no cgroup controller {', '.join(missing)} is mounted for this server's use"
        hierarchies: dict[str, _Hierarchy] = {}
        try:
            for controller, (group_dir, v2) in found.items():
                if v2:
                    _hand_down(group_dir, CONTROLLERS)
                base = group_dir / f"skiff-{name}"
                try:
                    base.mkdir()
                except FileExistsError:
                    pass
                else:
                    base.rmdir()  # only a probe that the server may: made for its first worker
                hierarchies[controller] = _Hierarchy(base, v2)
        except OSError as exc:
            return f"this server may not make cgroups ({exc})"
        return cls(hierarchies)

    def _bases(self) -> list[_Hierarchy]:
        """Each distinct directory once (v2 holds every controller in one)."""
        return list({h.base: h for h in self._hierarchies.values()}.values())

    def sweep(self) -> None:
        """Remove the groups an earlier run of this server left (it was killed)."""
        for hierarchy in self._bases():
            try:
                leftovers = [d for d in hierarchy.base.iterdir() if d.is_dir()]
            except FileNotFoundError:
                continue  # closed already
            for d in leftovers:
                Group([d]).remove()

    def make(self, key: str, caps: Caps) -> Group:
        """A fresh group for the worker or pod ``key``, with ``caps`` set; OSError when it
        cannot be made."""
        with self._sweeping:
            if not self._swept:
                self.sweep()
                self._swept = True
            # Made here, not when opened: a server that never starts a worker leaves nothing,
            # and one that ended its workers (``close``, when it lost the lead) and leads again
            # has it made anew.
            for hierarchy in self._bases():
                _made(hierarchy)
        dirs: list[Path] = []
        group = Group(dirs)
        try:
            for hierarchy in self._bases():
                d = hierarchy.base / key
                if d.exists():
                    Group([d]).remove()  # an instance before this one of the same key
                d.mkdir()
                dirs.append(d)
            for controller, hierarchy in self._hierarchies.items():
                for file, value in _settings(controller, caps, hierarchy.v2):
                    target = hierarchy.base / key / file.rstrip("?")
                    if file.endswith("?") and not target.exists():
                        continue  # a setting this kernel does not have, and need not
                    target.write_text(value)
        except OSError:
            group.remove()
            raise
        return group

    def close(self) -> None:
        """Remove skiff's directories where they hold no group (its workers have ended)."""
        for hierarchy in self._bases():
            with contextlib.suppress(OSError):
                hierarchy.base.rmdir()


def _made(hierarchy: _Hierarchy) -> bool:
    """Make skiff's directory of ``hierarchy`` where it is not there; whether it was made."""
    try:
        hierarchy.base.mkdir()
    except FileExistsError:
        return False
    if hierarchy.v2:
        (hierarchy.base / "cgroup.subtree_control").write_text(
            " ".join(f"+{c}" for c in CONTROLLERS)
        )
    return True


def _settings(controller: str, caps: Caps, v2: bool) -> Iterable[tuple[str, str]]:
    if controller == "pids" and caps.pids is not None:
        yield "pids.max", str(caps.pids)
    elif controller == "memory" and caps.memory_bytes is not None:
        if v2:
            yield "memory.max", str(caps.memory_bytes)
            yield "memory.swap.max?", "0"
        else:
            yield "memory.limit_in_bytes", str(caps.memory_bytes)
            # Swap too, where the kernel accounts it (at least the memory cap; after it).
            yield "memory.memsw.limit_in_bytes?", str(caps.memory_bytes)
    elif controller == "cpu" and caps.vcpus is not None:
        quota = caps.vcpus * _CPU_PERIOD_US
        if v2:
            yield "cpu.max", f"{quota} {_CPU_PERIOD_US}"
        else:
            yield "cpu.cfs_period_us", str(_CPU_PERIOD_US)
            yield "cpu.cfs_quota_us", str(quota)


def _find(proc: Path) -> dict[str, tuple[Path, bool]]:
    """The directory of this process's own group for each controller skiff uses, and whether
    it is in the v2 tree. A controller mounted in both counts where v1 has it (the kernel lets
    a controller serve only one hierarchy)."""
    mounts: dict[str, tuple[Path, str]] = {}  # controller (or "" for v2) -> mount point, root
    v2_mount: tuple[Path, str] | None = None
    for line in (proc / "mountinfo").read_text().splitlines():
        fields = line.split()
        if " - " not in line:
            continue
        after = line.split(" - ", 1)[1].split()
        fstype, options = after[0], after[2] if len(after) > 2 else ""
        root, point = fields[3], Path(fields[4].replace("\\040", " "))
        if fstype == "cgroup2":
            v2_mount = (point, root)
        elif fstype == "cgroup":
            for option in options.split(","):
                if option in CONTROLLERS:
                    mounts[option] = (point, root)
    own_v1: dict[str, str] = {}
    own_v2: str | None = None
    for line in (proc / "cgroup").read_text().splitlines():
        _id, listed, path = line.split(":", 2)
        if listed == "" and _id == "0":
            own_v2 = path
        for controller in listed.split(","):
            own_v1[controller] = path
    found: dict[str, tuple[Path, bool]] = {}
    for controller, (point, root) in mounts.items():
        if controller in own_v1:
            found[controller] = (_below(point, root, own_v1[controller]), False)
    if v2_mount is not None and own_v2 is not None:
        point, root = v2_mount
        group_dir = _below(point, root, own_v2)
        available = (group_dir / "cgroup.controllers").read_text().split()
        for controller in CONTROLLERS:
            if controller not in found and controller in available:
                found[controller] = (group_dir, True)
    return found


def _below(point: Path, root: str, own: str) -> Path:
    """The directory of group ``own`` in a hierarchy mounted at ``point`` from ``root``."""
    relative = own[len(root) :] if own.startswith(root) and root != "/" else own
    return point / relative.lstrip("/")


def _hand_down(group_dir: Path, controllers: Iterable[str]) -> None:
    """Let ``group_dir``'s children have ``controllers`` (cgroup v2). A group holding processes
    may not, unless it is the root: the processes there (this server alone is expected) move
    into a leaf, ``skiff-server``, first."""
    wanted = " ".join(f"+{c}" for c in controllers)
    control = group_dir / "cgroup.subtree_control"
    try:
        control.write_text(wanted)
        return
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            raise
    held = {int(p) for p in (group_dir / "cgroup.procs").read_text().split()}
    others = held - {os.getpid()}
    if others:
        # Moving another program's processes (a login shell's, a service manager's) is not
        # skiff's to do: give it a group of its own (systemd: ``Delegate=yes``).
        raise OSError(
            errno.EBUSY,
            f"its cgroup {group_dir} holds other processes ({len(others)}) besides the server",
        )
    leaf = group_dir / "skiff-server"
    leaf.mkdir(exist_ok=True)
    (leaf / "cgroup.procs").write_text(str(os.getpid()))
    control.write_text(wanted)
