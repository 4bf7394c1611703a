"""Reading the log files of one endpoint's folder: the last lines of its workers, filtered and
merged by time, and following them as they grow, across rotations (``WORKER.log`` and its
rotated ``.log.1`` … ``.log.N``, written by ``log_writer.py``; format in ``domain/logs.py``).
Everything here is blocking file I/O: callers on the event loop run it in a thread.
"""

from __future__ import annotations

import heapq
import math
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from skiff.domain.logs import LogLine, log_name, parse, rotated, worker_names

_BLOCK = 64 * 1024
#: The most one poll reads of one worker's log; the rest comes with the next poll, so a burst
#: never has to fit in memory at once.
_POLL_BYTES = 4 * 1024 * 1024

#: The most line text one read (``collect``) returns: the newest lines that fit.
MAX_READ_CHARS = 16 * 1024 * 1024

#: (st_dev, st_ino): which file a path named when it was opened, across renames.
_Ident = tuple[int, int]


@dataclass(frozen=True, slots=True)
class _Mark:
    """Where a follower starts in a worker's log: its backlog reads up to here, no further."""

    ident: _Ident
    pos: int


def _ident(f: BinaryIO) -> _Ident:
    st = os.fstat(f.fileno())
    return st.st_dev, st.st_ino


def _complete_end(f: BinaryIO, end: int) -> int:
    """The position just past the last newline before ``end`` (0 if none): a line still being
    written is not read yet."""
    pos = end
    while pos > 0:
        start = max(0, pos - _BLOCK)
        f.seek(start)
        found = f.read(pos - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        pos = start
    return 0


def _lines_backwards(f: BinaryIO, end: int) -> Iterator[bytes]:
    """The complete lines of ``f`` before ``end``, last first, reading from the end in blocks, so
    a tail of a big file costs only the blocks it needs."""
    pos = _complete_end(f, end)
    if pos == 0:
        return
    rest = b""
    first = True
    while pos > 0:
        start = max(0, pos - _BLOCK)
        f.seek(start)
        parts = (f.read(pos - start) + rest).split(b"\n")
        if first:
            parts.pop()  # the empty piece after the final newline
            first = False
        rest = parts[0]
        yield from reversed(parts[1:])
        pos = start
    yield rest


def order(per_worker: Iterable[list[LogLine]]) -> list[LogLine]:
    """Lines of several workers, each list already in order, merged by time. A line without a
    time sorts with the line before it in its own log, so a worker's order is never changed."""
    keyed: list[tuple[float, int, int, LogLine]] = []
    for index, lines in enumerate(per_worker):
        key = float("-inf")
        for seq, line in enumerate(lines):
            if line.time is not None:
                key = line.time
            keyed.append((key, index, seq, line))
    keyed.sort(key=lambda item: item[:3])
    return [item[3] for item in keyed]


def collect(
    directory: Path,
    names: list[str],
    since: float | None,
    tail: int | None,
    marks: dict[str, _Mark],
) -> list[LogLine]:
    """The last ``tail`` lines (all, with None) of these workers' logs, merged by time as
    ``order`` does, and no more than ``MAX_READ_CHARS`` of text: the newest that fit. One
    worker's files are open at a time, read from their end, and only the lines that may still
    be among the newest are held, however many workers there are and however long their
    lines (a tenant's worker can fill its log with 64 KiB lines)."""
    kept: list[tuple[_Key, int, LogLine]] = []  # a min-heap: the oldest kept line on top
    chars = 0
    for index, name in enumerate(names):
        for key, line in _newest_first(directory, name, index, since, marks.get(name)):
            full = (tail is not None and len(kept) >= tail) or chars >= MAX_READ_CHARS
            if full and (not kept or key < kept[0][0]):
                break  # older than everything kept: so is the rest of this worker's log
            size = len(line.line)
            heapq.heappush(kept, (key, size, line))
            chars += size
            while (tail is not None and len(kept) > tail) or (
                chars > MAX_READ_CHARS and len(kept) > 1
            ):
                chars -= heapq.heappop(kept)[1]
    kept.sort(key=lambda item: item[0])
    return [line for _key, _size, line in kept]


#: (time, or the time of the stamped line before it in its log; the worker's index; its place
#: in that log, counted back from the end): ``order``'s key, read backwards.
_Key = tuple[float, int, int]


def _newest_first(
    directory: Path, worker_id: str, index: int, since: float | None, mark: _Mark | None
) -> Iterator[tuple[_Key, LogLine]]:
    """A worker's lines from its newest back, each with its key. An unstamped line (written
    before lines were stamped) sorts with the stamped line before it, so it waits until that
    one is read."""
    files = _open_files(directory, worker_id)
    try:
        if mark is not None and not any(_ident(f) == mark.ident for f in files):
            mark = None  # the file the follower started in was rotated away: no limit then
        started = mark is None
        back = 0
        unstamped: list[LogLine] = []
        for f in files:
            end = os.fstat(f.fileno()).st_size
            if mark is not None and not started:
                if _ident(f) != mark.ident:
                    continue  # written after the follower's start: it reads those itself
                started = True
                end = min(end, mark.pos)
            for raw in _lines_backwards(f, end):
                ts, text = parse(raw)
                if ts is None:
                    if since is None:  # no time to compare with a since: left out then
                        unstamped.append(LogLine(worker_id, None, text))
                    continue
                if since is not None and ts < since:
                    return  # reading backwards, the rest is older still
                for line in (*unstamped, LogLine(worker_id, ts, text)):
                    back -= 1
                    yield (ts, index, back), line
                unstamped.clear()
        for line in unstamped:
            back -= 1
            yield (-math.inf, index, back), line
    finally:
        for f in files:
            f.close()


def _open_files(directory: Path, worker_id: str) -> list[BinaryIO]:
    """Every file of a worker's log, newest first, opened at once (a rotation in between would
    rename them under us; an open file keeps what it named). A file seen twice is kept once."""
    base = directory / log_name(worker_id)
    numbers: list[int] = []
    prefix = f"{base.name}."
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        if name.startswith(prefix) and name[len(prefix) :].isdigit():
            numbers.append(int(name[len(prefix) :]))
    files: list[BinaryIO] = []
    seen: set[_Ident] = set()
    for path in [base, *(rotated(base, n) for n in sorted(numbers))]:
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed by the caller
        except OSError:
            continue
        ident = _ident(f)
        if ident in seen:
            f.close()
            continue
        seen.add(ident)
        files.append(f)
    return files


@dataclass(slots=True)
class _Cursor:
    """Where a follower is in one worker's log: the file it reads (by handle, so a rotation
    does not move it) and the newer files still to read after it, oldest first."""

    worker: str
    path: Path
    file: BinaryIO
    ident: _Ident
    pos: int
    pending: list[BinaryIO]

    def switch(self, files: list[BinaryIO]) -> None:
        self.file.close()
        self.file, *self.pending = files
        self.ident = _ident(self.file)
        self.pos = 0

    def close(self) -> None:
        for f in (self.file, *self.pending):
            f.close()


class LogFollower:
    """New lines of an endpoint's (or one worker's) log since the follower was made: ``poll``
    returns what was written since the last poll, across rotations, and picks up workers that
    start later. ``backlog`` is the tail as of the follower's start, so backlog + polls neither
    miss nor repeat a line (unless the writer rotates past every backup between two polls)."""

    def __init__(self, directory: Path, worker_id: str | None, frozen: bool = False) -> None:
        self._dir = directory
        self._worker = worker_id
        #: A follower of a name that cannot be a log (from a hostile path) never reads.
        self._frozen = frozen
        self._cursors: dict[str, _Cursor] = {}
        # poll runs in a worker thread; close may come from the loop while one is under way.
        self._lock = threading.Lock()
        for name in self._names():
            self._open_at_end(name)

    def _names(self) -> list[str]:
        if self._frozen:
            return []
        if self._worker is not None:
            return [self._worker] if (self._dir / log_name(self._worker)).is_file() else []
        try:
            names = os.listdir(self._dir)
        except OSError:
            return []
        return worker_names(names)

    def _open_at_end(self, name: str) -> None:
        path = self._dir / log_name(name)
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed in close()
        except OSError:
            return  # between a rotation's rename and the new file: a new worker to the poll
        pos = _complete_end(f, os.fstat(f.fileno()).st_size)
        self._cursors[name] = _Cursor(name, path, f, _ident(f), pos, [])

    def _open_new(self, name: str) -> None:
        """A worker that started after the follower: all of its log is new."""
        files = _open_files(self._dir, name)[::-1]
        if files:
            first, *pending = files
            path = self._dir / log_name(name)
            self._cursors[name] = _Cursor(name, path, first, _ident(first), 0, pending)

    def backlog(self, since: float | None = None, tail: int | None = None) -> list[LogLine]:
        """The lines before the follower's start (``since`` and ``tail`` as in
        ``WorkerLogs.read``)."""
        with self._lock:
            marks = {name: _Mark(c.ident, c.pos) for name, c in self._cursors.items()}
        return collect(self._dir, sorted(marks), since, tail, marks)

    def poll(self) -> list[LogLine]:
        """The complete lines written since the last poll, merged by time."""
        with self._lock:
            for name in self._names():
                if name not in self._cursors:
                    self._open_new(name)
            per_worker = [
                [LogLine(name, ts, text) for ts, text in self._advance(cursor)]
                for name, cursor in self._cursors.items()
            ]
            return order(per_worker)

    def _advance(self, cursor: _Cursor) -> list[tuple[float | None, str]]:
        out: list[tuple[float | None, str]] = []
        budget = _POLL_BYTES
        while budget > 0:
            rotated_away = False
            if not cursor.pending:
                # Looked at before reading: once the name points elsewhere, the writer is done
                # with our file, so reading it to its end gets all of it.
                try:
                    st = os.stat(cursor.path)
                    rotated_away = (st.st_dev, st.st_ino) != cursor.ident
                except OSError:
                    pass  # mid-rotation, or the endpoint's folder was removed
            lines, used, at_end = self._read_new(cursor, budget)
            out.extend(lines)
            budget -= used
            if not at_end:
                break
            if cursor.pending:
                cursor.switch(cursor.pending)
            elif rotated_away:
                newer = self._newer_files(cursor)
                if not newer:
                    break
                cursor.switch(newer)
            else:
                break
        return out

    def _newer_files(self, cursor: _Cursor) -> list[BinaryIO]:
        """The files written after the cursor's (it may have been rotated more than once),
        oldest first; all of them when the cursor's own was rotated away entirely."""
        files = _open_files(self._dir, cursor.worker)
        idents = [_ident(f) for f in files]
        cut = idents.index(cursor.ident) if cursor.ident in idents else len(files)
        for f in files[cut:]:
            f.close()
        return files[:cut][::-1]

    @staticmethod
    def _read_new(cursor: _Cursor, budget: int) -> tuple[list[tuple[float | None, str]], int, bool]:
        """Complete lines from the cursor on (at most ``budget`` bytes), the bytes used, and
        whether that reached the end of the file."""
        cursor.file.seek(cursor.pos)
        data = cursor.file.read(budget)
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == budget:
            end = len(data)  # a line longer than a whole poll (an old, uncapped log)
        cursor.pos += end
        chunk = data[:end]
        raws = chunk.removesuffix(b"\n").split(b"\n") if chunk else []
        at_end = len(data) < budget and end == len(data)
        return [parse(raw) for raw in raws], end, at_end

    def close(self) -> None:
        """Closes its files; a follower may be closed more than once, and polls nothing after."""
        with self._lock:
            for cursor in self._cursors.values():
                cursor.close()
            self._cursors.clear()
            self._frozen = True

    def __enter__(self) -> LogFollower:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
