"""Directory trees a tenant's code writes (a worker's home, a pod's disk, a network volume):
measured and removed by coreutils' ``du`` and ``rm``, in a process of their own.

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
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

#: ``du -k`` counts in KiB; ``st_blocks`` in 512-byte units whatever the block size.
_KIB = 1024
_BLOCK = 512


def allocated_bytes(root: Path) -> int:
    """The disk space the files below ``root`` take: allocated blocks (a sparse file counts
    what it holds, not its length), each file once however many names it has, links not
    followed, other file systems mounted inside not entered, whatever cannot be read passed
    over. ``root``'s own entry is left out, so an empty directory holds 0; so does a ``root``
    that is not there."""
    try:
        own = os.lstat(root).st_blocks * _BLOCK
    except OSError:
        return 0
    done = subprocess.run(
        ["du", "-s", "-x", "-k", "--", str(root)],
        capture_output=True,
        check=False,
        # A shared machine's locale must not change the figure's form.
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
    )
    if done.returncode:
        # Something below could not be read, or vanished meanwhile: the rest is counted.
        log.warning("du %s: %s", root, done.stderr.decode(errors="replace").strip()[:500])
    try:
        total = int(done.stdout.split(maxsplit=1)[0]) * _KIB
    except (IndexError, ValueError):
        return 0
    return max(0, total - own)


def remove_tree(path: Path) -> None:
    """``path`` and everything below it, gone, whatever its depth; a link is removed, not
    followed; nothing when it is gone already."""
    if not os.path.lexists(path):
        return
    done = subprocess.run(["rm", "-rf", "--", str(path)], capture_output=True, check=False)
    if done.returncode:
        log.warning("rm %s: %s", path, done.stderr.decode(errors="replace").strip()[:500])
