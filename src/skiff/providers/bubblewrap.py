"""A local worker's network volume, mounted at ``/runpod-volume`` by bubblewrap (``bwrap``).

The worker runs in a private mount namespace that shows it the host as it is (every top-level
entry of ``/`` bound in place with its devices, so ``/dev``, ``/proc``, GPUs, ``/tmp`` and the
worker's home are the host's own; the network, pids and users are not unshared) plus the
volume's directory, read-write, at ``VOLUME_MOUNT_PATH``.

Why each top-level entry is bound on its own rather than ``--dev-bind / /``: bwrap makes a
mount point that does not exist, and under ``/`` bound whole it would make
``/runpod-volume`` on the host's own root (left behind for good, and refused outright to a
server that does not run as root). Binding the entries one by one over bwrap's own empty root
gives the new directory a home that vanishes with the namespace. What differs from a bare
process, as a result: ``/`` itself is a small in-memory directory (a file a worker makes
directly in ``/`` is not the host's), a top-level entry made after the worker started is not
seen, and mounts are ``nosuid`` (bwrap's rule), so a setuid program such as ``sudo`` does not
raise privileges inside.

Signals: skiff stops a worker with SIGTERM to its process group and then SIGKILL
(``local.py``). bwrap's own process (which waits for the worker, outside the namespace) would
die at once of that SIGTERM, and with ``--die-with-parent`` take the worker with it unwarned.
So bwrap is started with SIGTERM ignored (``local.py``'s shim), and the first thing run inside
restores it (``_RESTORE_TERM``) before it becomes the worker: the worker gets its grace, and
bwrap ends when the worker does, with its exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from skiff.providers.base import VOLUME_MOUNT_PATH

#: Debian's package that provides it, for the messages that ask for it.
PACKAGE = "bubblewrap"


def mount_problem(mount: str) -> str | None:
    """Why ``mount`` cannot hold a volume here, or None: only a top-level directory can (see
    the module's docstring: a deeper one would be made on the host's own file system)."""
    entry = mount.strip("/")
    if not entry or "/" in entry:
        return (
            f"{mount!r} is not a top-level directory (such as /workspace): a process pod's "
            "volume is mounted at the top of its file system"
        )
    return None


#: Run inside the namespace: SIGTERM back to its default, then become the worker.
_RESTORE_TERM = (
    "import os,signal,sys\n"
    "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)
#: How long the capability probe may take (it starts two processes).
_PROBE_SECONDS = 10.0


def executable() -> str | None:
    return shutil.which("bwrap")


def command(
    bwrap: str,
    argv: list[str],
    volume: Path,
    root: Path = Path("/"),
    mount: str = VOLUME_MOUNT_PATH,
) -> list[str]:
    """``argv`` run by ``bwrap`` with ``volume`` at ``mount`` (a top-level directory:
    ``mount_problem``). The caller starts it with SIGTERM ignored (see the module's
    docstring)."""
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
                # -try: an entry removed since it was listed is skipped, not fatal.
                args += ["--dev-bind-try", path, path]
    args += ["--dir", f"/{entry_name}", "--bind", str(volume), f"/{entry_name}"]
    return [*args, "--", sys.executable, "-S", "-I", "-c", _RESTORE_TERM, *argv]


async def problem() -> str | None:
    """None when a volume can be mounted here: bwrap is installed and makes its namespace
    (tried for real, with a directory of its own); otherwise why not, in words for a user."""
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
        try:
            proc = await asyncio.create_subprocess_exec(
                *command(bwrap, [sys.executable, "-S", "-I", "-c", probe], Path(volume)),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            return f"bwrap could not be started: {exc}"
        try:
            _, err = await asyncio.wait_for(proc.communicate(), _PROBE_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return f"bwrap did not make its namespace within {_PROBE_SECONDS:g} s"
    if proc.returncode == 0:
        return None
    said = err.decode(errors="replace").strip().splitlines()
    reason = said[-1] if said else f"exit code {proc.returncode}"
    hint = ""
    if any(word in reason for word in ("namespace", "uid map", "Operation not permitted")):
        hint = (
            "; unprivileged user namespaces may be turned off (sysctl "
            "kernel.unprivileged_userns_clone, or an AppArmor rule), or run skiff as root"
        )
    return f"bwrap could not run a worker with a volume here ({reason}){hint}"
