"""Where network volumes live on disk: one directory per volume, named by its id, under
``SKIFF_VOLUMES_DIR`` (default ``DATA_DIR/volumes``).

A plain directory has no quota of its own: this module measures (``used_bytes``, the disk space
its files take, as ``du`` counts it) and says how much the disk has free (``free_bytes``); the
volumes service refuses a size the disk cannot hold. Nothing here stops a worker from writing
past its volume's size (docs/volumes.md). Every call is blocking file-system work:
the service runs it in a thread.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from skiff.datadir import make_private_dirs

#: ``st_blocks`` counts 512-byte units whatever the file system's block size.
_BLOCK = 512


#: Walks (``measure``) under way at once, per ``VolumeDirs``: a volume of millions of files
#: takes minutes, and the walks run in the event loop's shared threads, which everyone's log
#: reads, pod starts and Docker calls need too.
MEASURING_AT_ONCE = 2


class VolumeDirs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._measuring = asyncio.Semaphore(MEASURING_AT_ONCE)

    async def measure(self, volume_id: str) -> int:
        """``used_bytes`` in a thread, ``MEASURING_AT_ONCE`` at most: more wait their turn
        here rather than take the threads others need."""
        async with self._measuring:
            return await asyncio.to_thread(self.used_bytes, volume_id)

    def path(self, volume_id: str) -> Path:
        # Ids are made by skiff (ids.short_id): never a path of their own.
        return self.root / volume_id

    def make(self, volume_id: str) -> Path:
        """The volume's directory, made for the user running skiff alone (``datadir.py``), with
        the volumes root if missing; an existing one is kept as it is."""
        path = self.path(volume_id)
        make_private_dirs(path)
        return path

    def remove(self, volume_id: str) -> None:
        """The directory and everything in it, gone; nothing when it is gone already."""
        shutil.rmtree(self.path(volume_id), ignore_errors=True)

    def exists(self, volume_id: str) -> bool:
        return self.path(volume_id).is_dir()

    def free_bytes(self) -> int:
        """What an unprivileged user may still write on the disk that holds the volumes (the
        root's reserved blocks left out)."""
        make_private_dirs(self.root)
        return shutil.disk_usage(self.root).free

    def used_bytes(self, volume_id: str) -> int:
        """The disk space the volume's files take: allocated blocks, a file with several hard
        links counted once, symbolic links not followed, whatever cannot be read skipped.

        It walks by directory handles, each opened from its parent's with ``O_NOFOLLOW``: a
        pod that swaps a directory of its volume for a symbolic link while the walk is under
        way (to have the server measure the data directory, or walk the whole disk) ends that
        branch instead of leading the walk out. Other file systems mounted inside are not
        entered."""
        try:
            top = os.open(self.path(volume_id), _DIRECTORY)
        except OSError:
            return 0
        device = os.fstat(top).st_dev
        total = 0
        seen: set[tuple[int, int]] = set()
        # Depth first, one open directory per level: a wide tree holds few handles.
        walking: list[tuple[int, Iterator[os.DirEntry[str]]]] = []
        _enter(top, walking)
        while walking:
            fd, entries = walking[-1]
            entry = next(entries, None)
            if entry is None:
                walking.pop()
                _leave(fd, entries)
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_dev != device:
                continue
            if stat.S_ISDIR(info.st_mode):
                try:
                    child = os.open(entry.name, _DIRECTORY, dir_fd=fd)
                except OSError:
                    continue  # swapped for a link meanwhile, or gone: not followed
                _enter(child, walking)
            elif info.st_nlink > 1:
                if (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * _BLOCK
        return total


#: How the walk opens a directory: never through a symbolic link.
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _enter(fd: int, walking: list[tuple[int, Iterator[os.DirEntry[str]]]]) -> None:
    try:
        walking.append((fd, os.scandir(fd)))
    except OSError:
        os.close(fd)


def _leave(fd: int, entries: Iterator[os.DirEntry[str]]) -> None:
    close = getattr(entries, "close", None)
    if close is not None:
        close()
    os.close(fd)
