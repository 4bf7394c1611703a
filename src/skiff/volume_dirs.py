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
import time
from collections.abc import Callable
from pathlib import Path

from skiff.datadir import folders, free_bytes, make_private_dirs
from skiff.keyed_turns import KeyedTurns
from skiff.tenant_trees import allocated_bytes, remove_tree

#: Walks (``measure``) under way at once, per ``VolumeDirs``: a volume of millions of files
#: takes minutes, and the walks run in the event loop's shared threads, which everyone's log
#: reads, pod starts and Docker calls need too.
MEASURING_AT_ONCE = 2
#: Of those, one owner's at a time: the others' walks go on beside it.
MEASURING_PER_OWNER = 1
#: A volume measured this recently is answered with that figure (every read of a volume asks).
FRESH_SECONDS = 10.0


class VolumeDirs:
    """Walks are shared and kept: one walk of a volume at a time, whoever asks (the others
    wait for its figure), and its figure served for ``FRESH_SECONDS``; and one owner's walks
    take one of the ``MEASURING_AT_ONCE`` at a time. Without that, one tenant asking for its
    volume of many files 40 times at once held every other tenant's volume reads for seconds
    behind its walks."""

    def __init__(self, root: Path, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self._monotonic = monotonic
        self._measuring = asyncio.Semaphore(MEASURING_AT_ONCE)
        self._owners = KeyedTurns(MEASURING_PER_OWNER)
        #: volume id -> (when measured, the figure), and the walks under way.
        self._measured: dict[str, tuple[float, int]] = {}
        self._walking: dict[str, asyncio.Future[int]] = {}

    async def measure(self, volume_id: str, owner: str) -> int:
        """``used_bytes`` of the volume (or pod volume) that ``owner`` holds, as described
        above."""
        known = self._measured.get(volume_id)
        if known is not None and self._monotonic() - known[0] < FRESH_SECONDS:
            return known[1]
        walking = self._walking.get(volume_id)
        if walking is None:
            walking = asyncio.ensure_future(self._walk(volume_id, owner))
            self._walking[volume_id] = walking
            walking.add_done_callback(lambda _done: self._walking.pop(volume_id, None))
        return await asyncio.shield(walking)

    async def _walk(self, volume_id: str, owner: str) -> int:
        async with self._owners.turn(owner), self._measuring:
            used = await asyncio.to_thread(self.used_bytes, volume_id)
        self._measured[volume_id] = (self._monotonic(), used)
        return used

    def path(self, volume_id: str) -> Path:
        # Ids are made by skiff (ids.short_id): never a path of their own.
        return self.root / volume_id

    def make(self, volume_id: str) -> Path:
        """The volume's directory, made for the user running skiff alone (``datadir.py``), with
        the volumes root if missing; an existing one is kept as it is."""
        path = self.path(volume_id)
        make_private_dirs(path)
        return path

    def folders(self, older_than: float) -> set[str]:
        """The ids of the volume directories here last changed before ``older_than`` (a
        wall-clock time)."""
        return folders(self.root, older_than)

    def remove(self, volume_id: str) -> None:
        """The directory and everything in it, gone; nothing when it is gone already."""
        remove_tree(self.path(volume_id))
        self._measured.pop(volume_id, None)

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
