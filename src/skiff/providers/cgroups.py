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

What a sandboxed process sees of cgroups (``view``, shown by ``bubblewrap.py``): its own group
at each hierarchy's usual place and nothing above it, as in a container. bwrap gives the
sandbox a cgroup namespace, which starts at the group the shim joined, so ``/proc/self/cgroup``
says ``/`` and the mount's root in ``/proc/self/mountinfo`` is ``/``: a library (a JVM, Go's
automaxprocs, a thread pool's sizing) finds its own limits, and no other worker's or tenant's
group is in sight. A sandboxed zygote's sandbox is made once for all its workers, so the group
it starts in is a parent (``make_parent``, ``forks.N``) that its sandbox shows: the zygote is
moved into a capped group of its own within it before its interpreter runs (``settle``), and
each worker forked from it into its own beside it (``make(..., under=)``), which it finds by
``/proc/self/cgroup`` (``/w1.N``) below the shown parent. Only its endpoint's zygote and forked
workers are in that parent.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
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
#: How many times ``Cgroups.settle`` looks again for processes left to move (one forked while
#: the others moved).
_SETTLE_ROUNDS = 20
#: The kernel's first cgroup namespace, the host's: its inode number is fixed
#: (``CGROUP_NS_INIT_INO``).
_HOST_CGROUP_NAMESPACE = 0xEFFFFFFB
#: Where the cgroup hierarchies are mounted on nearly every host, and shown in the sandbox.
CGROUP_MOUNTS = Path("/sys/fs/cgroup")
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
        """Kill what is left in it and remove it, the groups made within it first (a sandboxed
        zygote's workers'). A directory that still holds a process after ``_REMOVE_SECONDS``
        stays (the next server start's sweep takes it)."""
        deadline = time.monotonic() + _REMOVE_SECONDS
        for d in self.dirs:
            _remove_tree(d, deadline)


def _remove_tree(d: Path, deadline: float) -> None:
    try:
        within = [c for c in d.iterdir() if c.is_dir()]
    except OSError:
        within = []
    for child in within:
        _remove_tree(child, deadline)
    alone = Group([d])
    while True:
        alone.kill()
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                log.warning("could not remove the cgroup %s: %s", d, exc)
                return
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

    def make(self, key: str, caps: Caps, under: Group | None = None) -> Group:
        """A fresh group for the worker or pod ``key``, with ``caps`` set, in skiff's directory
        or ``under`` a group of it (a sandboxed zygote's ``parent``, settled); OSError when it
        cannot be made."""
        group = self._fresh(key, under)
        try:
            self._cap(group, caps)
        except OSError:
            group.remove()
            raise
        return group

    def _cap(self, group: Group, caps: Caps) -> None:
        """Write ``caps`` into ``group``'s directories (one per ``_bases``, in that order)."""
        bases = self._bases()
        for controller, hierarchy in self._hierarchies.items():
            d = group.dirs[bases.index(hierarchy)]
            for file, value in _settings(controller, caps, hierarchy.v2):
                target = d / file.rstrip("?")
                if file.endswith("?") and not target.exists():
                    continue  # a setting this kernel does not have, and need not
                target.write_text(value)

    def make_parent(self, key: str) -> Group:
        """A fresh group ``key`` with no caps, for a sandboxed zygote and the workers forked
        from it: the zygote's shim joins it, so that its sandbox's cgroup namespace starts
        there and the sandbox shows it (``view``); ``settle`` then moves the zygote into a
        capped group of its own within it, where its workers' groups are made beside it."""
        return self._fresh(key, None)

    def settle(self, parent: Group, key: str, caps: Caps) -> Group:
        """Move every process of ``parent`` (made by ``make_parent``) into a fresh group
        ``key`` within it, capped at ``caps``, and let ``parent``'s groups have the
        controllers (v2 allows that only once it holds no process); OSError when it cannot."""
        made = Group([d / key for d in parent.dirs])
        try:
            for d in made.dirs:
                d.mkdir()
            for _ in range(_SETTLE_ROUNDS):
                held = parent.pids()
                if not held:
                    break
                for pid in held:
                    with contextlib.suppress(ProcessLookupError):
                        made.add(pid)  # one that has ended meanwhile needs no move
            else:
                raise OSError(errno.EBUSY, f"the processes of {parent.dirs} would not move")
            for d, hierarchy in zip(parent.dirs, self._bases(), strict=True):
                if hierarchy.v2:
                    (d / "cgroup.subtree_control").write_text(
                        " ".join(f"+{c}" for c in CONTROLLERS)
                    )
            self._cap(made, caps)
        except OSError:
            made.remove()
            raise
        return made

    def _fresh(self, key: str, under: Group | None) -> Group:
        """An empty directory ``key`` in each hierarchy, in skiff's or ``under``'s."""
        with self._sweeping:
            if not self._swept:
                self.sweep()
                self._swept = True
            # Made here, not when opened: a server that never starts a worker leaves nothing,
            # and one that ended its workers (``close``, when it lost the lead) and leads again
            # has it made anew.
            for hierarchy in self._bases():
                _made(hierarchy)
        places = [h.base for h in self._bases()] if under is None else under.dirs
        dirs: list[Path] = []
        group = Group(dirs)
        try:
            for place in places:
                d = place / key
                if d.exists():
                    Group([d]).remove()  # an instance before this one of the same key
                d.mkdir()
                dirs.append(d)
        except OSError:
            group.remove()
            raise
        return group

    def view(self, group: Group | None, proc: Path = Path("/proc/self")) -> View:
        """What a sandbox of a process in ``group`` shows (``View``)."""
        return view(group, [h.base for h in self._bases()], proc)

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


@dataclass(frozen=True, slots=True)
class _Mount:
    """One line of ``mountinfo``: the file system's id, the directory of it mounted (its
    ``root``, as this process's cgroup namespace names it), where, its type and options."""

    fs: str
    root: str
    point: Path
    fstype: str
    options: frozenset[str]


def _unescape(text: str) -> str:
    """A path as ``mountinfo`` writes it: a space, tab, newline or backslash in octal."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _mounts(proc: Path) -> list[_Mount]:
    """The cgroup hierarchies mounted in ``proc``'s mount namespace, in mounting order."""
    found: list[_Mount] = []
    for line in (proc / "mountinfo").read_text().splitlines():
        if " - " not in line:
            continue
        before, after_text = line.split(" - ", 1)
        fields, after = before.split(), after_text.split()
        fstype, options = after[0], after[2] if len(after) > 2 else ""
        if fstype in ("cgroup", "cgroup2"):
            mount = _Mount(
                fields[2],
                _unescape(fields[3]),
                Path(_unescape(fields[4])),
                fstype,
                frozenset(options.split(",")),
            )
            found.append(mount)
    return found


def _memberships(proc: Path) -> list[tuple[frozenset[str] | None, str]]:
    """``proc``'s group in each hierarchy: its v1 controllers (and ``name=`` options), None
    for v2, and the group's path."""
    found: list[tuple[frozenset[str] | None, str]] = []
    for line in (proc / "cgroup").read_text().splitlines():
        _id, listed, path = line.split(":", 2)
        if listed == "" and _id == "0":
            found.append((None, path))
        else:
            found.append((frozenset(listed.split(",")), path))
    return found


def _member_of(mount: _Mount, memberships: list[tuple[frozenset[str] | None, str]]) -> str | None:
    """The path of the group in ``mount``'s hierarchy that the process is in."""
    for names, path in memberships:
        if names is None and mount.fstype == "cgroup2":
            return path
        if names is not None and mount.fstype == "cgroup" and names <= mount.options:
            return path
    return None


def _find(proc: Path) -> dict[str, tuple[Path, bool]]:
    """The directory of this process's own group for each controller skiff uses, and whether
    it is in the v2 tree. A controller mounted in both counts where v1 has it (the kernel lets
    a controller serve only one hierarchy)."""
    mounts: dict[str, tuple[Path, str]] = {}  # controller (or "" for v2) -> mount point, root
    v2_mount: tuple[Path, str] | None = None
    for mount in _mounts(proc):
        if mount.fstype == "cgroup2":
            v2_mount = (mount.point, mount.root)
        else:
            for option in mount.options:
                if option in CONTROLLERS:
                    mounts[option] = (mount.point, mount.root)
    own_v1: dict[str, str] = {}
    own_v2: str | None = None
    for names, path in _memberships(proc):
        if names is None:
            own_v2 = path
        else:
            for controller in names:
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


def _holds_groups(d: Path) -> bool:
    """Whether the group ``d`` has groups within it; True where it cannot be read."""
    try:
        with os.scandir(d) as entries:
            return any(e.is_dir(follow_symlinks=False) for e in entries)
    except OSError:
        return True


@dataclass(frozen=True, slots=True)
class Shown:
    """A directory of the host's cgroup hierarchies (``source``) shown read-only at ``point``
    in a sandbox: the hierarchy's own mount point, its usual place."""

    source: Path
    point: Path


@dataclass(frozen=True, slots=True)
class View:
    """What a sandbox shows of the host's cgroups, as container runtimes do: ``covered``, every
    place a hierarchy is mounted, hidden under an empty directory (``/sys/fs/cgroup`` itself),
    then ``shown`` over them. So a worker sees no other worker's or tenant's group, and a
    library finds its own limits where ``/proc/self/cgroup`` and ``/proc/self/mountinfo`` say."""

    covered: tuple[Path, ...] = ()
    shown: tuple[Shown, ...] = ()


def view(group: Group | None, bases: Iterable[Path] = (), proc: Path = Path("/proc/self")) -> View:
    """What a sandbox of a process in ``group`` (its cgroup namespace starting there: bwrap's
    ``--unshare-cgroup``, once the shim has joined it) shows of each hierarchy mounted here:

    - one where skiff makes groups (``bases``, skiff's directories): ``group``'s own directory
      there at the hierarchy's mount point, nothing above it; nothing without a group;
    - any other (a v1 controller skiff does not use, a hybrid host's empty v2 tree): the group
      the process is in there, which is the server's own and holds none of skiff's, so that a
      runtime that wants every controller (the JVM: cpuset and cpuacct), or a server run in a
      capped container that makes no groups, finds them; not where that group holds groups
      (the host's root group holds every group of the host, another server's tenants'
      among them), nor where it is the host's root.

    One of skiff's hierarchies mounted twice is shown at the mount its groups were made under
    only. Nothing is shown where the hierarchies cannot be read."""
    try:
        mounts = _mounts(proc)
        memberships = _memberships(proc)
        host_namespace = os.stat(proc / "ns" / "cgroup").st_ino == _HOST_CGROUP_NAMESPACE
    except OSError:
        return View((CGROUP_MOUNTS,), ())

    def holder(path: Path) -> _Mount | None:
        """The mount ``path`` lies in (the deepest)."""
        found = [m for m in mounts if path == m.point or m.point in path.parents]
        return max(found, key=lambda m: len(m.point.parts), default=None)

    skiffs = {m.fs for base in bases if (m := holder(base)) is not None}
    own: dict[Path, Path] = {}  # mount point -> the group's directory there
    for d in group.dirs if group is not None else []:
        mount = holder(d)
        if mount is not None:
            skiffs.add(mount.fs)
            own[mount.point] = d
    shown: list[Shown] = []
    for mount in mounts:
        if mount.fs in skiffs:
            if mount.point in own:
                shown.append(Shown(own[mount.point], mount.point))
            continue
        path = _member_of(mount, memberships)
        if path is None or (path == "/" and host_namespace):
            continue
        if mount.root != "/":
            if path != mount.root and not path.startswith(mount.root + "/"):
                continue  # its group lies outside what this mount shows
            path = path[len(mount.root) :]
        source = mount.point / path.lstrip("/")
        if _holds_groups(source):
            continue  # of another program's, or of another server's tenants
        shown.append(Shown(source, mount.point))
    # A place shown twice (a hierarchy mounted over another): the last one, as on the host.
    last = {s.point: s for s in shown}
    return View(
        tuple(dict.fromkeys([CGROUP_MOUNTS, *(m.point for m in mounts)])),
        tuple(last.values()),
    )


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
