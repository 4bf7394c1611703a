"""The sandbox of local workers and pods, and their volume mounts, made by bubblewrap (``bwrap``).

**The sandbox** (``Sandbox``, on by default; ``SKIFF_SANDBOX=off`` turns it off). A user's code
is hostile to every other user's, so each local worker and pod runs in namespaces of its own:

- a user namespace in which it is uid 1000 with no capabilities (``no_new_privs`` is set by
  bwrap), mapped outside to the server's own uid, so that the host's files it may read (a
  checkout, a virtual environment under the server user's home) keep working;
- a PID namespace: it sees and can signal only its own processes (no other ``/proc/*/environ``,
  no server to signal, no ``/proc/<server>/fd`` to reach the database through);
- a mount namespace over an empty root: every top-level entry of the host bound in place
  read-only, a fresh ``/dev`` (plus exactly its GPUs' device nodes), ``/proc`` of its own,
  a private ``/tmp`` and ``/run`` (the host's sockets there, Docker's and PostgreSQL's among
  them, are not reachable), and ``hidden`` paths under empty directories or an empty file: the
  data directory wherever it lies (database, lock, logs, every worker's and pod's home), the
  volumes directory, the database file, and the credentials of the server's own user (its SSH
  and cloud keys, ``/etc/shadow``). Into that come, writable, only its own home and its volume;
- a cgroup namespace, and of the host's cgroups (``/sys/fs/cgroup``) only its own group at each
  hierarchy's usual place (``cgroups.view``, ``_sys_args``): no other worker's or tenant's
  group, its own limits where libraries look for them;
- its own IPC namespace (no other tenant's System V shared memory).

What it keeps: the host's network (it reaches the server at its URL), its environment, exit
code, output (through the pipe the server reads) and its SIGTERM grace (below). Of the network
it may bind only its own TCP ports, where the kernel can fence them (``port_fence.py``).

A file under the host's ``/tmp`` that the command names (its program, script, working directory,
``PYTHONPATH`` or virtual environment) stays reachable read-only: the top-level ``/tmp`` entry
that holds it is bound in, so a template command pointing at a script there runs unchanged.

Why each top-level entry is bound on its own rather than ``/`` whole: bwrap makes a mount point
that does not exist, and under ``/`` bound whole it would make ``/runpod-volume`` on the host's
own root (left behind for good). Binding the entries one by one over bwrap's own empty root gives
the new directory a home that vanishes with the namespace. What differs from a bare process:
``/`` itself is a small in-memory directory, a top-level entry made after the worker started is
not seen, and mounts are ``nosuid``, so a setuid program such as ``sudo`` does not raise
privileges inside.

**Without the sandbox** (turned off, or for an administrator's worker on a host that cannot make
one: ``services/fleet.py``) a worker with a volume still goes through bwrap, in a mount
namespace that only adds the volume (``mount_command``).

Signals: skiff stops a worker with SIGTERM to its process group and then SIGKILL
(``local.py``); a process group reaches into the PID namespace. bwrap's own process would die at
once of that SIGTERM, and with ``--die-with-parent`` take the worker with it unwarned. So bwrap is
started with SIGTERM ignored (``local.py``'s shim), and the first thing run inside restores it
(``_RESTORE_TERM``) before it becomes the worker: the worker gets its grace, and bwrap ends when
the worker does, with its exit code. ``--new-session`` is not used for the same reason: a worker
in a session of its own would be out of the group the server signals (it has no terminal to
guard anyway: its stdin is ``/dev/null``, its output a pipe).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skiff.providers import port_fence
from skiff.providers.base import VOLUME_MOUNT_PATH
from skiff.providers.cgroups import CGROUP_MOUNTS, View

log = logging.getLogger(__name__)

#: Debian's package that provides it, for the messages that ask for it.
PACKAGE = "bubblewrap"

#: Who the worker is inside its user namespace: an ordinary uid, not root.
SANDBOX_UID = 1000
SANDBOX_GID = 1000

#: Top-level entries that are never the host's own inside: made fresh (``/dev``, ``/proc``) or
#: private (``/tmp``, ``/run``, whose sockets lead to the host's services).
_OWN_ENTRIES = frozenset({"dev", "proc", "tmp", "run"})
#: The host's top-level entry rebuilt inside from its own entries rather than bound whole:
#: ``/sys``, whose ``fs/cgroup`` must never come in (``_sys_args``).
_SYS = "sys"

#: The host's files that stay hidden although the server's uid could read them: credentials.
HOST_SECRETS = (
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/ssl/private",
    "/var/lib/docker",
    "/var/lib/containers",
    "/var/run/docker.sock",
)
#: The same, under the home directory of the server's own user.
HOME_SECRETS = (
    ".ssh",
    ".gnupg",
    ".docker",
    ".aws",
    ".azure",
    ".kube",
    ".config/gcloud",
    ".pgpass",
    ".netrc",
    ".git-credentials",
    ".my.cnf",
    ".pypirc",
    # Package managers' and tools' tokens.
    ".npmrc",
    ".yarnrc.yml",
    ".config/pip",
    ".pip",
    ".config/gh",
    ".config/hub",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".vault-token",
    ".terraform.d",
    ".s3cfg",
    ".boto",
    ".oci",
    ".config/doctl",
    ".config/rclone",
    ".huggingface",
    ".cache/huggingface/token",
    ".bash_history",
    ".python_history",
    ".psql_history",
    ".rediscli_history",
)

#: The NVIDIA nodes every GPU process needs besides its cards' own ``/dev/nvidiaN``.
_NVIDIA_SHARED_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)

#: What the C library's loader and resolver act on in the environment of any program they start
#: (the variables glibc drops for a setuid program, and all of ``LD_``): a worker's or pod's
#: ``env`` may set them for its own programs, never for the server's shim and bwrap, which run
#: outside the sandbox. They are given to the sandbox with ``--setenv`` instead.
LOADER_VARIABLES = (
    "LD_",
    "GCONV_PATH",
    "GETCONF_DIR",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TMPDIR",
    "TZDIR",
)


def outside_and_inside(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` split in two: what the programs that make the sandbox may run with, and the
    loader's variables (``LOADER_VARIABLES``), which only the command inside gets."""
    inside = {k: v for k, v in env.items() if k.startswith(LOADER_VARIABLES)}
    return {k: v for k, v in env.items() if k not in inside}, inside


#: Run inside the namespace: SIGTERM back to its default, then become the worker.
_RESTORE_TERM = (
    "import os,signal,sys\n"
    "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)
#: How long the capability probe may take (it starts two processes).
_PROBE_SECONDS = 10.0
#: A failed probe is asked again after this long, not on every start or status read.
_PROBE_RETRY_SECONDS = 30.0


def mount_problem(mount: str) -> str | None:
    """Why ``mount`` cannot hold a volume here, or None: only a top-level directory can (see
    the module's docstring: a deeper one would be made on the host's own file system)."""
    entry = mount.strip("/")
    if not entry or "/" in entry:
        return (
            f"{mount!r} is not a top-level directory (such as /workspace): a process pod's "
            "volume is mounted at the top of its file system"
        )
    if entry in _OWN_ENTRIES or entry == _SYS:
        return f"{mount!r} is a directory of the system; mount the volume at /workspace"
    return None


def executable() -> str | None:
    return shutil.which("bwrap")


def _host_entries(root: Path, skip: Iterable[str], inside: str = "") -> list[str]:
    """Every entry of the directory ``root`` bound read-only at ``inside/NAME`` (a symlink made
    as such), except ``skip``: with ``inside`` empty, the host's top level in place."""
    skipped = set(skip)
    args: list[str] = []
    with os.scandir(root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name in skipped:
                continue
            path = f"{inside}/{entry.name}"
            if entry.is_symlink():
                args += ["--symlink", os.readlink(entry.path), path]
            else:
                # -try: an entry removed since it was listed is skipped, not fatal.
                args += ["--ro-bind-try", path, path]
    return args


def _files_args(root: Path, files: Mapping[str, Path]) -> tuple[set[str], list[str]]:
    """``files`` (a path inside -> the host's file shown there read-only, such as
    ``/etc/rp_environment``): the top-level directories that hold them, which are then made
    anew on an in-memory directory holding the host's entries and these files (bwrap cannot
    make a file's mount point in a read-only bind, and must not make it on the host's own
    directory); and the arguments that do so. Each is made read-only again afterwards
    (``_remount_args``)."""
    tops: dict[str, list[tuple[str, Path]]] = {}
    for inside, source in files.items():
        parts = Path(inside).parts
        if len(parts) != 3 or parts[0] != "/":
            raise ValueError(f"{inside!r}: a file shown in the sandbox lies in a top-level folder")
        tops.setdefault(parts[1], []).append((parts[2], source))
    args: list[str] = []
    for top, placed in sorted(tops.items()):
        names = {name for name, _ in placed}
        args += ["--tmpfs", f"/{top}"]
        if (root / top).is_dir():
            args += _host_entries(root / top, names, f"/{top}")
        for name, source in placed:
            args += ["--ro-bind", str(source), f"/{top}/{name}"]
    return set(tops), args


#: A sandbox that shows nothing of cgroups.
NO_CGROUPS = View()


def _sys_args(root: Path, view: View) -> list[str]:
    """The host's ``/sys`` read-only, showing of its cgroups only ``view`` (``cgroups.view``).

    ``/sys`` and ``/sys/fs`` are made anew from their entries, each bound read-only, and never
    bound whole: a bind takes every mount below it along, and the hierarchies mounted under
    ``/sys/fs/cgroup`` would then be listed in the sandbox's ``/proc/self/mountinfo`` even
    covered, where a library looking for its own limits would take one of them for its own.
    ``/sys/fs/cgroup`` is an empty read-only directory holding the host's symlinks there
    (``cpu`` to ``cpu,cpuacct``) and the shown directories, each at its hierarchy's mount
    point; a hierarchy mounted anywhere else is covered by an empty directory."""
    host = root / _SYS
    if not host.is_dir() or host.is_symlink():
        return []
    made = [f"/{_SYS}"]  # the directories made anew, made read-only again last
    args = ["--tmpfs", f"/{_SYS}"]
    args += _host_entries(host, {"fs"}, f"/{_SYS}")
    fs = host / "fs"
    usual = root / CGROUP_MOUNTS.relative_to("/")
    if fs.is_dir() and not fs.is_symlink():
        made.append(f"/{_SYS}/fs")
        args += ["--tmpfs", f"/{_SYS}/fs"]
        args += _host_entries(fs, {CGROUP_MOUNTS.name}, f"/{_SYS}/fs")
        if not any(s.point == CGROUP_MOUNTS for s in view.shown):
            made.append(str(CGROUP_MOUNTS))
            args += ["--tmpfs", str(CGROUP_MOUNTS)]
            if usual.is_dir() and not usual.is_symlink():
                with os.scandir(usual) as entries:
                    for entry in sorted(entries, key=lambda e: e.name):
                        if entry.is_symlink():
                            link = os.readlink(entry.path)
                            args += ["--symlink", link, str(CGROUP_MOUNTS / entry.name)]
    for point in view.covered:
        if _under(point, CGROUP_MOUNTS) or any(_under(point, Path("/", e)) for e in _OWN_ENTRIES):
            continue  # never brought in, or never the host's inside
        if (root / point.relative_to("/")).is_dir():
            args += ["--tmpfs", str(point)]
    for shown in view.shown:
        if _under(shown.point, CGROUP_MOUNTS) and not fs.is_dir():
            continue
        args += ["--ro-bind-try", str(shown.source), str(shown.point)]
    for directory in reversed(made):
        args += ["--remount-ro", directory]
    return args


def _volume_args(volume: Path | None, mount: str) -> list[str]:
    if volume is None:
        return []
    problem = mount_problem(mount)
    if problem is not None:
        raise ValueError(problem)
    # Absolute: bwrap runs in the server's directory, but a relative path handed on is a
    # trap for whatever reads it next.
    return ["--dir", mount.rstrip("/"), "--bind", str(volume.resolve()), mount.rstrip("/")]


def mount_command(
    bwrap: str,
    argv: list[str],
    volume: Path,
    root: Path = Path("/"),
    mount: str = VOLUME_MOUNT_PATH,
) -> list[str]:
    """``argv`` run by ``bwrap`` in a mount namespace that shows it the host as it is plus
    ``volume`` at ``mount`` (a top-level directory: ``mount_problem``): no sandbox, for a worker
    that runs without one. The caller starts it with SIGTERM ignored."""
    problem = mount_problem(mount)
    if problem is not None:
        raise ValueError(problem)
    entry_name = mount.strip("/")
    args = [bwrap, "--die-with-parent"]
    with os.scandir(root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name == entry_name:
                continue  # a host's own directory of that name is hidden under the volume
            path = f"/{entry.name}"
            if entry.is_symlink():
                args += ["--symlink", os.readlink(entry.path), path]
            else:
                args += ["--dev-bind-try", path, path]
    args += ["--dir", f"/{entry_name}", "--bind", str(volume.resolve()), f"/{entry_name}"]
    return [*args, "--", sys.executable, "-S", "-I", "-c", _RESTORE_TERM, *argv]


def _needs_under(needed: Iterable[str], place: Path) -> bool:
    """Whether what the command needs (its interpreter, its import path) lies under ``place``
    on the host (a Python installed under ``/root``), which then cannot be covered by a home."""
    for text in needed:
        if text.startswith("/") and _under(Path(os.path.realpath(text)), place):
            return True
    return False


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _tmp_needs(paths: Iterable[str], tmp: Path) -> list[Path]:
    """What of the host's ``tmp`` the command names (absolute paths only, resolved: a symlink
    or ``..`` leads where it really goes, never to a second view of something hidden): the
    directory of a named file (a script imports its neighbours), the root of a named virtual
    environment's interpreter, a named directory; never ``tmp`` itself, never a socket."""
    found: set[Path] = set()
    for text in paths:
        if not text.startswith("/"):
            continue
        real = Path(os.path.realpath(text))
        # The interpreter of a virtual environment resolves to the system's: its root is what
        # is needed (site-packages, pyvenv.cfg).
        named = Path(os.path.normpath(text))
        venv = named.parent.parent
        if named.parent.name == "bin" and (venv / "pyvenv.cfg").is_file():
            real = Path(os.path.realpath(venv))
        try:
            if real.is_file():
                real = real.parent
            elif not real.is_dir():
                continue
        except OSError:
            continue
        if real != tmp and _under(real, tmp):
            found.add(real)
    # A directory inside another one bound already adds nothing.
    return sorted(p for p in found if not any(q != p and _under(p, q) for q in found))


def _sockets_in(directory: Path) -> list[Path]:
    """The sockets directly in ``directory``: bound read-only, a socket still takes a
    connection, so each is covered (a tmux, ssh-agent, X11 or PostgreSQL socket of the host)."""
    try:
        with os.scandir(directory) as entries:
            return [
                Path(e.path)
                for e in entries
                if not e.is_symlink() and stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode)
            ]
    except OSError:
        return []


def _hide(path: Path) -> list[str]:
    """Arguments that cover ``path`` (resolved: a hidden ``~/.ssh`` that is a symlink is
    covered where it leads): an empty directory over a directory, the empty ``/dev/null`` over
    anything else; nothing for a path that does not exist."""
    path = Path(os.path.realpath(path))
    try:
        is_dir = path.is_dir() and not path.is_symlink()
        exists = path.exists() or path.is_symlink()
    except OSError:
        return []
    if not exists:
        return []
    if is_dir:
        return ["--tmpfs", str(path)]
    return ["--ro-bind", "/dev/null", str(path)]


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What a sandboxed worker or pod never sees, and how to run one (the module's docstring).
    ``hidden``: absolute paths covered inside, the data directory first."""

    bwrap: str | None
    hidden: tuple[Path, ...]
    #: The host's root, and its ``/tmp``, as listed: tests pass their own.
    root: Path = Path("/")
    tmp: Path = Path("/tmp")
    #: Its processes may bind only their own TCP ports (``port_fence.py``): where this kernel
    #: can fence them.
    fenced: bool = False
    _probe: dict[str, tuple[float, str | None]] = field(
        default_factory=dict, compare=False, repr=False
    )
    _asking: asyncio.Lock = field(default_factory=asyncio.Lock, compare=False, repr=False)

    @classmethod
    def for_server(
        cls,
        data_dir: Path,
        *,
        volumes_dir: Path,
        database_file: Path | None,
        server_home: Path | None = None,
        extra: Sequence[Path] = (),
        fence_ports: bool = True,
    ) -> Sandbox:
        """The sandbox of this server's workers: the data directory, the volumes directory, the
        SQLite file (with its journal files) where it lies outside them, the host's and the
        server user's credentials, and ``extra``, all hidden; with ``fence_ports``, only their
        own TCP ports bindable where the kernel can fence them."""
        hidden: list[Path] = [data_dir.resolve(), volumes_dir.resolve()]
        if database_file is not None:
            db = database_file.resolve()
            if not any(_under(db, h) for h in hidden):
                hidden += [Path(f"{db}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")]
        hidden += [Path(p) for p in HOST_SECRETS]
        home = server_home if server_home is not None else Path.home()
        hidden += [home / p for p in HOME_SECRETS]
        hidden += [p.resolve() for p in extra]
        if not fence_ports:
            return cls(executable(), tuple(dict.fromkeys(hidden)))
        problem = port_fence.fence_problem() if sys.platform == "linux" else "not Linux"
        if problem is not None:
            log.warning("the sandbox's ports are not fenced: %s", problem)
        return cls(executable(), tuple(dict.fromkeys(hidden)), fenced=problem is None)

    def command(
        self,
        argv: list[str],
        *,
        home: Path,
        cwd: Path | None,
        env: Mapping[str, str],
        volume: Path | None = None,
        mount: str = VOLUME_MOUNT_PATH,
        gpu_indices: Sequence[int] = (),
        reach: Sequence[str] = (),
        home_also_at: str | None = None,
        files: Mapping[str, Path] | None = None,
        setenv: Mapping[str, str] | None = None,
        argv_needed: bool = True,
        cgroups: View = NO_CGROUPS,
    ) -> list[str]:
        """``argv`` run inside the sandbox, ``home`` (and ``volume`` at ``mount``) writable,
        in ``cwd`` (the server's own when None). ``reach``: files the command will use that
        its ``argv`` does not name (a fork server's workers' scripts), made visible as the
        ``argv``'s are. ``home_also_at``: a second place the home is seen at (a pod's
        ``/root``, where the hosted platform's pods keep it), unless the command needs what
        the host keeps there (its Python). ``files``: host files shown
        read-only at these paths (``_files_args``). ``setenv``: variables set inside only
        (``outside_and_inside``). ``argv_needed``: False when ``argv`` is a command line
        rather than files (a session's), so that only ``reach`` says what of the host's
        ``/tmp`` it sees. ``cgroups``: what it sees of the host's cgroups (``_sys_args``:
        nothing by default). The caller starts it with SIGTERM ignored."""
        if self.bwrap is None:
            raise FileNotFoundError(
                2, f"bubblewrap (bwrap) is not installed (Debian's {PACKAGE} package)"
            )
        workdir = (cwd or Path.cwd()).resolve()
        home = home.resolve()
        files = files or {}
        mount_entry = mount.strip("/") if volume is not None else None
        args = [self.bwrap, "--die-with-parent", "--tmpfs", "/"]
        rebuilt, files_args = _files_args(self.root, files)
        own = _OWN_ENTRIES | rebuilt | {_SYS} | ({mount_entry} if mount_entry else set())
        args += _host_entries(self.root, own)
        args += files_args
        args += _sys_args(self.root, cgroups)
        args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run"]
        # Name resolution may go through a resolver's file under /run (systemd-resolved).
        args += ["--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve"]
        needed = [
            *(argv if argv_needed else []),
            *reach,
            sys.executable,
            sys.prefix,
            # The server's own import path: an editable install's source, which a worker of
            # skiff's (a ready-made model's) imports through the virtual environment's .pth.
            *sys.path,
            *env.get("PYTHONPATH", "").split(":"),
            env.get("VIRTUAL_ENV", ""),
        ]
        # What lies in a hidden path (the home, a working directory in it) is bound on its
        # own: it must not bring in what is around the data directory.
        resolved_hidden = [Path(os.path.realpath(p)) for p in self.hidden]
        reachable_tmp = [
            p
            for p in _tmp_needs([*needed, str(workdir)], self.tmp)
            if not any(_under(p, h) for h in resolved_hidden)
        ]
        for entry in reachable_tmp:
            args += ["--ro-bind-try", str(entry), str(entry)]
            for socket_path in _sockets_in(entry):
                args += ["--ro-bind", "/dev/null", str(socket_path)]
        for path in self.hidden:
            if self._shown(Path(os.path.realpath(path)), reachable_tmp):
                args += _hide(path)
        # Its volume, then its home: a data directory under the volume's mount path keeps the
        # home in sight.
        args += _volume_args(volume, mount)
        # After them: the home lies inside the data directory, covered just now.
        args += ["--bind", str(home), str(home)]
        if home_also_at is not None and not _needs_under(needed, Path(home_also_at)):
            args += ["--bind", str(home), home_also_at]
        for top in sorted(rebuilt):
            args += ["--remount-ro", f"/{top}"]
        # The driver's shared nodes only for a worker with GPUs: without, they are only more
        # of the kernel within a CPU worker's reach.
        for node in _NVIDIA_SHARED_NODES if gpu_indices else ():
            args += ["--dev-bind-try", node, node]
        for index in gpu_indices:
            # NVIDIA numbers its device nodes by the cards' minor numbers, which follow the PCI
            # order NVML's indices (and CUDA_DEVICE_ORDER=PCI_BUS_ID) do.
            args += ["--dev-bind-try", f"/dev/nvidia{index}", f"/dev/nvidia{index}"]
        args += [
            "--unshare-user",
            # No user namespaces of its own inside: less of the kernel within its reach.
            "--disable-userns",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_GID),
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-cgroup-try",
            "--chdir",
            str(workdir),
        ]
        for name, value in (setenv or {}).items():
            args += ["--setenv", name, value]
        return [*args, "--", sys.executable, "-S", "-I", "-c", _RESTORE_TERM, *argv]

    def _shown(self, path: Path, reachable_tmp: list[Path]) -> bool:
        """Whether ``path`` (resolved) would be seen inside at all: not when it lies in a
        private entry (``/run``, ``/dev``, ...) or in a part of ``/tmp`` not bound in."""
        if _under(path, self.tmp):
            return any(_under(path, entry) for entry in reachable_tmp)
        return not any(_under(path, self.root / name) for name in _OWN_ENTRIES)

    async def problem(self) -> str | None:
        """None when a sandbox can be made here: bwrap is installed and makes its namespaces
        (tried for real, with a home of its own); otherwise why not, in words for a user. A
        success is remembered; a failure is asked again after a while."""
        async with self._asking:  # one probe at a time: the others take its answer
            seen = self._probe.get("last")
            if seen is not None and (seen[1] is None or time.monotonic() < seen[0]):
                return seen[1]
            found = await self._try()
            self._probe["last"] = (time.monotonic() + _PROBE_RETRY_SECONDS, found)
            return found

    async def _try(self) -> str | None:
        if sys.platform != "linux":
            return "the sandbox of local workers needs Linux, with bubblewrap (bwrap)"
        if self.bwrap is None:
            return (
                f"bubblewrap (bwrap), which makes the sandbox of local workers, is not "
                f"installed on the server (Debian's {PACKAGE} package)"
            )
        # Its uid, and a file written in its home: the namespaces and the mounts both work.
        probe = (
            f"import os; assert os.getuid() == {SANDBOX_UID}; "
            "open(os.path.join(os.environ['HOME'], 'probe'), 'w').close()"
        )
        with tempfile.TemporaryDirectory(prefix="skiff-sandbox-probe-") as home:
            argv = [sys.executable, "-S", "-I", "-c", probe]
            env = {"HOME": home, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
            command = self.command(argv, home=Path(home), cwd=Path(home), env=env)
            if self.fenced:
                # As a worker starts: behind the fence, which sets no_new_privs before bwrap.
                command = port_fence.fenced(command)
            return await run_probe(command, env, "a sandboxed worker")


async def run_probe(command: list[str], env: Mapping[str, str] | None, what: str) -> str | None:
    """Run ``command`` (bwrap's) and say why it failed, None when it ran.

    It runs in a process group of its own, killed whole once it is over: bwrap forks the
    sandbox's own init, and one left behind (its parent killed before it handed over the
    namespace, on a machine too busy to finish within the time) must not outlive the probe.
    Its errors go to a file, not a pipe: asyncio's ``wait`` waits for a pipe to close as well
    as for the process, and a process left behind would hold it open for ever."""
    with tempfile.TemporaryFile() as said_file:
        try:
            proc = await asyncio.create_subprocess_exec(
                *command,
                env=dict(env) if env is not None else None,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=said_file,
                start_new_session=True,
            )
        except OSError as exc:
            return f"bwrap could not be started: {exc}"
        try:
            async with asyncio.timeout(_PROBE_SECONDS):
                await proc.wait()
        except TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            return f"bwrap did not make its namespace within {_PROBE_SECONDS:g} s"
        except BaseException:
            # Cancelled (the server stops while it asks): the probe is not left to outlive the
            # loop that watches it.
            _kill_group(proc.pid)
            with contextlib.suppress(BaseException):
                await asyncio.shield(proc.wait())
            raise
        finally:
            _kill_group(proc.pid)  # whatever of it is left
        said_file.seek(0)
        err = said_file.read()
    if proc.returncode == 0:
        return None
    said = err.decode(errors="replace").strip().splitlines()
    reason = said[-1] if said else f"exit code {proc.returncode}"
    hint = ""
    if any(word in reason for word in ("namespace", "uid map", "Operation not permitted")):
        hint = (
            "; unprivileged user namespaces may be turned off (sysctl "
            "kernel.unprivileged_userns_clone or user.max_user_namespaces, or an AppArmor "
            "rule), or run skiff as root"
        )
    return f"bwrap could not run {what} here ({reason}){hint}"


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def problem() -> str | None:
    """None when a volume can be mounted into a worker that runs without the sandbox: bwrap is
    installed and makes its mount namespace (tried for real, with a directory of its own);
    otherwise why not, in words for a user."""
    if sys.platform != "linux":
        return "network volumes of local workers need Linux, with bubblewrap (bwrap)"
    bwrap = executable()
    if bwrap is None:
        return (
            f"bubblewrap (bwrap), which mounts a volume into a local worker, is not installed "
            f"on the server (Debian's {PACKAGE} package)"
        )
    probe = f"import os; os.listdir({VOLUME_MOUNT_PATH!r})"
    with tempfile.TemporaryDirectory(prefix="skiff-bwrap-probe-") as volume:
        command = mount_command(bwrap, [sys.executable, "-S", "-I", "-c", probe], Path(volume))
        return await run_probe(command, None, "a worker with a volume")
