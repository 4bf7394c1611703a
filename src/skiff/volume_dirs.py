"""Where network volumes live on disk: one directory per volume, named by its id, under
``SKIFF_VOLUMES_DIR`` (default ``DATA_DIR/volumes``).

A plain directory has no quota of its own: this module measures (``used_bytes``, the disk space
its files take, as ``du`` counts it) and says how much the disk has free (``free_bytes``); the
volumes service refuses a size the disk cannot hold. Nothing here stops a worker from writing
past its volume's size (docs/volumes.md). Every call is blocking file-system work:
the service runs it in a thread.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from skiff.datadir import make_private_dirs

#: ``st_blocks`` counts 512-byte units whatever the file system's block size.
_BLOCK = 512


class VolumeDirs:
    def __init__(self, root: Path) -> None:
        self.root = root

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
        links counted once, symbolic links not followed, whatever cannot be read skipped."""
        total = 0
        seen: set[tuple[int, int]] = set()
        pending = [str(self.path(volume_id))]
        while pending:
            try:
                entries = os.scandir(pending.pop())
            except OSError:
                continue
            with entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(entry.path)
                    elif info.st_nlink > 1:
                        if (info.st_dev, info.st_ino) in seen:
                            continue
                        seen.add((info.st_dev, info.st_ino))
                    total += info.st_blocks * _BLOCK
        return total
