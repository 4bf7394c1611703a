"""What skiff keeps on disk is for the user running it alone.

The data directory holds the database (registry passwords, ``s3Config`` secrets, the secrets that
worker tokens, console sessions and webhook signatures derive from), the workers' logs and their
homes. Whatever skiff creates is made private to the user (directories 0700, files 0600) when it
is created, not chmod-ed afterwards, so there is no moment at which it is readable by others.
A data directory left open by an earlier version (or made by hand) is closed at start, with a
warning, since its files may already have been read.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_private_dir(path: Path) -> None:
    """The data directory: created for the user alone, or tightened (with a warning) when it
    exists open to others. Its parents are left as they are: the user's home, a shared
    folder."""
    make_private_dirs(path)
    tighten(path, DIR_MODE)


def make_private_dirs(path: Path) -> None:
    """Create every missing level of ``path`` 0700 (``mkdir(parents=True)`` would give the
    levels above the last the default mode). Existing ones are left as they are."""
    missing: list[Path] = []
    while not path.exists():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for level in reversed(missing):
        level.mkdir(mode=DIR_MODE, exist_ok=True)


def create_private_file(path: Path) -> None:
    """Create an empty file readable by the user alone, unless it exists (then tighten it)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        tighten(path, FILE_MODE)
        return
    os.close(fd)


def private_opener(path: str, flags: int) -> int:
    """An ``opener`` for ``open``/``io.FileIO``: a file it creates is 0600 from the start."""
    return os.open(path, flags | os.O_CLOEXEC, FILE_MODE)


def tighten(path: Path, mode: int) -> None:
    """Take away what group and others may do with ``path``, with a warning when they could."""
    try:
        current = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if not current & 0o077:
        return
    try:
        os.chmod(path, current & mode)
    except OSError as exc:  # not ours (e.g. a shared folder): say so, it cannot be fixed here
        log.warning(
            "%s is open to other users (mode %04o) and could not be made private: %s; "
            "it holds secrets, so restrict it by hand",
            path,
            current,
            exc,
        )
        return
    log.warning(
        "%s was open to other users (mode %04o); made it private (mode %04o). Anything it held "
        "may have been read: rotate the registry passwords and keys stored there if others "
        "share this host",
        path,
        current,
        current & mode,
    )


def free_bytes(path: Path) -> int:
    """The bytes an unprivileged writer may still use on ``path``'s file system: root's
    reserved blocks are not counted, as the server should not live on them."""
    return shutil.disk_usage(path).free


def folders(root: Path, older_than: float | None = None) -> set[str]:
    """The names of the folders in ``root`` (none when it is missing; a link is not one);
    with ``older_than`` (a wall-clock time), only those last changed before it."""
    found = set()
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return set()
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if older_than is not None and entry.stat(follow_symlinks=False).st_mtime >= older_than:
                continue
        except FileNotFoundError:
            continue
        found.add(entry.name)
    return found
