"""Writing a worker's log: its output cut into lines, each stamped with the time it was read,
in a file capped and rotated (``WORKER.log``, ``.log.1`` … ``.log.N``; the format is in
``domain/logs.py``). ``LogFile`` is the ``LogSink`` every provider writes into."""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from attrs import define, field

from skiff.datadir import private_opener
from skiff.domain.log_pace import LogPace
from skiff.domain.logs import MAX_LINE_BYTES, rotated, stamp

log = logging.getLogger(__name__)

#: Defaults of ``SKIFF_LOG_MAX_BYTES`` and ``SKIFF_LOG_BACKUPS``.
DEFAULT_LOG_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_LOG_BACKUPS = 2
#: Default of ``SKIFF_LOG_BURST_BYTES``.
DEFAULT_LOG_BURST_BYTES = 4 * 1024 * 1024


@define(eq=False, repr=False, slots=False)
class LogFile:
    """A worker's log: appends stamped lines and rotates the file when it would pass
    ``max_bytes`` (a file holds at least one line, so one is never above the cap by more than
    a line). ``WORKER.log`` becomes ``.log.1``, ``.1`` becomes ``.2`` …, the oldest past
    ``backups`` is dropped. A write that fails (disk full, the endpoint's folder removed) turns
    the log off rather than stop reading the worker's output, which would block the worker.

    ``paces``: how fast the output may come (``domain/log_pace.py``: the log's own, its
    user's), timed by ``monotonic``; none: as fast as it is written."""

    path: Path
    _max_bytes: int
    _backups: int
    _paces: tuple[LogPace, ...] = ()
    _monotonic: Callable[[], float] = time.monotonic
    _file: io.FileIO | None = field(init=False)
    _size: int = field(init=False)
    #: The output fed since its last newline.
    _pending: bytes = field(init=False, default=b"")

    def __attrs_post_init__(self) -> None:
        # 0600 from the start: a worker's output can hold whatever its handler printed.
        self._file = io.FileIO(self.path, "ab", opener=private_opener)
        self._size = os.fstat(self._file.fileno()).st_size

    def feed(self, data: bytes) -> float:
        """The worker's output as it comes: complete lines are written, stamped now. Lines are
        cut at MAX_LINE_BYTES, so one line never holds more memory than that. The seconds its
        copier waits before it reads more (``LogSink.feed``)."""
        pending = self._pending + data
        lines = pending.split(b"\n")
        pending = lines.pop()
        if max(map(len, lines), default=0) <= MAX_LINE_BYTES:
            out = lines  # no line to cut (the usual case)
        else:
            out = []
            for line in lines:
                out.extend(
                    line[i : i + MAX_LINE_BYTES] for i in range(0, len(line), MAX_LINE_BYTES)
                )
                if not line:
                    out.append(line)
        while len(pending) >= MAX_LINE_BYTES:
            out.append(pending[:MAX_LINE_BYTES])
            pending = pending[MAX_LINE_BYTES:]
        self._pending = pending
        self.write(out, time.time())
        if not self._paces:
            return 0.0
        now = self._monotonic()
        # Every pace counts the bytes (a list, not a generator: none is skipped); the slowest
        # says how long to wait.
        return max([pace.spend(len(data), now) for pace in self._paces])

    def write(self, lines: list[bytes], ts: float) -> None:
        """Append ``lines`` (without their newlines), stamped ``ts`` (epoch seconds)."""
        if self._file is None or not lines:
            return
        prefix = stamp(ts)
        size = len(prefix) * len(lines) + sum(map(len, lines)) + len(lines)
        if self._size + size <= self._max_bytes:
            # The usual case, whole in the current file: one join, with no Python-level step
            # per line (a worker at the SDK's default level writes a dozen lines per job).
            self._append(prefix + (b"\n" + prefix).join(lines) + b"\n")
            return
        batch = bytearray()
        for line in lines:
            used = self._size + len(batch)
            if used > 0 and used + len(prefix) + len(line) + 1 > self._max_bytes:
                self._append(batch)
                batch.clear()
                self._rotate()
                if self._file is None:
                    return
            batch += prefix
            batch += line
            batch += b"\n"
        self._append(batch)

    def _append(self, data: bytes | bytearray) -> None:
        # One write() per batch: a reader never sees the file grow by half a line (but for
        # batches past a page, which readers tolerate by keeping only complete lines).
        view = memoryview(data)
        try:
            while view and self._file is not None:
                written = self._file.write(view)
                if not written:  # None only for non-blocking files; this one blocks
                    raise OSError("the log file accepted no bytes")
                view = view[written:]
                self._size += written
        except OSError as exc:
            self._fail(exc)

    def _rotate(self) -> None:
        assert self._file is not None
        self._file.close()
        try:
            if self._backups > 0:
                # os.replace overwrites the target: the oldest file past `backups` is dropped.
                for n in range(self._backups, 1, -1):
                    older = rotated(self.path, n - 1)
                    if older.exists():
                        os.replace(older, rotated(self.path, n))
                os.replace(self.path, rotated(self.path, 1))
            else:
                # A new file rather than a truncated one, so a follower sees a new inode.
                self.path.unlink(missing_ok=True)
            # Never recreates the folder: if it is gone, the endpoint was deleted.
            self._file = io.FileIO(self.path, "ab", opener=private_opener)
            self._size = 0
        except OSError as exc:
            self._file = None
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        log.warning("writing the log %s failed (%s); the rest of it is dropped", self.path, exc)
        if self._file is not None:
            self._file.close()
            self._file = None

    def close(self) -> None:
        """Keeps the last line of a worker that died mid-line, then closes the file."""
        if self._pending:
            pending, self._pending = self._pending, b""
            self.write([pending], time.time())
        if self._file is not None:
            self._file.close()
            self._file = None
