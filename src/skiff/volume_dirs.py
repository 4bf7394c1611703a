"""Where network volumes live on disk: one directory per volume, named by its id, under
``SKIFF_VOLUMES_DIR`` (default ``DATA_DIR/volumes``).

A plain directory has no quota of its own: this module measures (``used_bytes``, the disk space
its files take, as ``du`` counts it: ``tenant_trees.py``) and says how much the disk has free
(``free_bytes``); the volumes service refuses a size the disk cannot hold. Nothing here stops a
worker from writing past its volume's size (docs/volumes.md). Every call is blocking
file-system work: the service runs it in a thread.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from skiff.datadir import free_bytes, make_private_dirs
from skiff.tenant_trees import allocated_bytes, remove_tree

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
        remove_tree(self.path(volume_id))

    def exists(self, volume_id: str) -> bool:
        return self.path(volume_id).is_dir()

    def free_bytes(self) -> int:
        """What an unprivileged user may still write on the disk that holds the volumes (the
        root's reserved blocks left out)."""
        make_private_dirs(self.root)
        return free_bytes(self.root)

    def used_bytes(self, volume_id: str) -> int:
        """The disk space the volume's files take (``tenant_trees.allocated_bytes``)."""
        return allocated_bytes(self.path(volume_id))
