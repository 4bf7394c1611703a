"""Directory trees a tenant's code writes (a worker's home, a pod's disk, a network volume):
measured (bytes and files) and removed by coreutils' ``du`` and ``rm``, in a process of their own.

A tenant shapes these trees as it likes, so a walk of them in the server must survive any
shape. Python's own falls short twice: ``shutil.rmtree`` recurses, and raises
``RecursionError`` on a tree nested a few thousand directories deep, leaving it on the disk for
good; a walk by directory handles holds one per level, so a deep enough tree takes every
handle the server has, its connections' included. ``du`` and ``rm`` walk with gnulib's ``fts``:
any depth with a bounded number of handles, each directory opened from its parent without
following a link (a directory swapped for a link meanwhile leads nowhere), and their handles
are not the server's. Both are blocking: the async code runs them in a thread.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

#: ``du -k`` counts in KiB; ``st_blocks`` in 512-byte units whatever the block size.
_KIB = 1024
_BLOCK = 512
#: How long one count may take: a tree of millions of files is not counted at all rather than
#: hold up the check of every other endpoint.
COUNT_TIMEOUT_SECONDS = 300.0


def _as_owner() -> list[str]:
    """The prefix that runs a command with its owner's full rights over the files a tenant
    made: a worker runs as the server's own user outside its sandbox, so it can ``chmod 000``
    a directory to hide it from an unprivileged ``du`` and keep ``rm`` out. In a user namespace
    of its own, mapped to the server's user, the command holds the capabilities that pass
    over permission bits on that user's files, and on no one else's. Root needs none."""
    if os.geteuid() == 0 or shutil.which("unshare") is None:
        return []
    return ["unshare", "--user", "--map-root-user"]


def _run(argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
    """``argv`` with its owner's rights where a user namespace can be made, else as it is."""
    # A shared machine's locale must not change the figure's form.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    prefix = _as_owner()
    done = subprocess.run(
        [*prefix, *argv], capture_output=True, check=False, env=env, timeout=timeout
    )
    if prefix and done.returncode and not done.stdout and b"unshare" in done.stderr:
        # User namespaces are off on this host: the plain command counts what it can read.
        done = subprocess.run(argv, capture_output=True, check=False, env=env, timeout=timeout)
    return done


def _du(root: Path, unit: str) -> int | None:
    """``du -s -x`` of ``root`` in ``unit`` (``-k``: KiB, ``--inodes``: entries), ``root``
    included; None when it could not be counted (logged). What vanished meanwhile or could
    not be read is passed over, the rest counted."""
    try:
        done = _run(["du", "-s", "-x", unit, "--", str(root)], timeout=COUNT_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("could not count %s: %s", root, exc)
        return None
    if done.returncode:
        log.warning("du %s: %s", root, done.stderr.decode(errors="replace").strip()[:500])
    try:
        return int(done.stdout.split(maxsplit=1)[0])
    except (IndexError, ValueError):
        return None


def allocated_bytes(root: Path) -> int:
    """The disk space the files below ``root`` take: allocated blocks (a sparse file counts
    what it holds, not its length), each file once however many names it has, links not
    followed, other file systems mounted inside not entered, whatever cannot be read passed
    over. ``root``'s own entry is left out, so an empty directory holds 0; so does a ``root``
    that is not there, or one that could not be counted (logged)."""
    try:
        own = os.lstat(root).st_blocks * _BLOCK
    except FileNotFoundError:
        return 0
    except OSError:
        own = 0  # a tenant made its parent unreadable: counted with the owner's rights
    total = _du(root, "-k")
    return 0 if total is None else max(0, total * _KIB - own)


def file_count(root: Path) -> int:
    """How many files, directories and other entries are below ``root`` (each file once
    however many names it has), walked as ``allocated_bytes`` walks: each takes an inode, of
    which a disk has a fixed number, so empty files exhaust it where bytes never would.
    ``root`` itself is left out; 0 for a ``root`` that is not there or could not be counted."""
    if not os.path.lexists(root):
        return 0
    total = _du(root, "--inodes")
    return 0 if total is None else max(0, total - 1)


def remove_tree(path: Path) -> None:
    """``path`` and everything below it, gone, whatever its depth or its permission bits; a
    link is removed, not followed; nothing when it is gone already."""
    try:
        done = _run(["rm", "-rf", "--", str(path)])
    except OSError as exc:
        log.warning("could not remove %s: %s", path, exc)
        return
    if done.returncode:
        log.warning("rm %s: %s", path, done.stderr.decode(errors="replace").strip()[:500])
