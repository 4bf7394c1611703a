"""One live ``skiff serve`` per data directory (and per SQLite database).

A second server on state in use would run its whole start-up against it: sweep the first
server's workers as leftovers, requeue and then fail their jobs. So ``serve`` takes an exclusive
OS lock (``flock``) on a file in the data directory before anything else and holds it for the
life of the process; the kernel frees it however the process ends (kill -9 included), so a lock
never outlives its server and needs no clean-up. The file records the holder's pid and URL, so
the refusal can name the server that runs. A SQLite database kept outside the data directory
gets a lock file beside it as well.

Only ``serve`` takes it: ``skiff keys``, ``migrate`` and the other commands open the store
without serving and work beside a running server.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from skiff.datadir import FILE_MODE, tighten

#: The lock file in the data directory.
LOCK_NAME = "serve.lock"


class AlreadyServing(Exception):
    """Another live server holds the lock; the message names it."""


@dataclass(frozen=True, slots=True)
class Holder:
    pid: int | None
    url: str | None
    data_dir: str | None


def lock_path_of_database(database: Path) -> Path:
    return database.with_name(database.name + ".lock")


class ServeLock:
    """The held locks; ``release`` (or the process's end) frees them."""

    def __init__(self, fds: list[int]) -> None:
        self._fds = fds

    def release(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the only descriptor frees the flock
        self._fds = []


def take(paths: list[Path], url: str, data_dir: Path) -> ServeLock:
    """Lock every path (created 0600 if missing) or none: ``AlreadyServing`` names the holder.
    Their folders must exist."""
    fds: list[int] = []
    try:
        for path in paths:
            fds.append(_take_one(path, url, data_dir))
    except BaseException:
        ServeLock(fds).release()
        raise
    return ServeLock(fds)


def _take_one(path: Path, url: str, data_dir: Path) -> int:
    # O_CLOEXEC: a worker process must never inherit (and so keep holding) the lock.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        tighten(path, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AlreadyServing(_refusal(read_holder(path), path, data_dir)) from None
        record = orjson.dumps({"pid": os.getpid(), "url": url, "dataDir": str(data_dir.resolve())})
        os.ftruncate(fd, 0)
        os.pwrite(fd, record + b"\n", 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_holder(path: Path) -> Holder:
    """Who recorded holding ``path``; fields it could not read are None (the holder may be
    writing it this very moment)."""
    try:
        record = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return Holder(None, None, None)
    if not isinstance(record, dict):
        return Holder(None, None, None)
    pid = record.get("pid")
    url = record.get("url")
    data_dir = record.get("dataDir")
    return Holder(
        pid if isinstance(pid, int) else None,
        url if isinstance(url, str) else None,
        data_dir if isinstance(data_dir, str) else None,
    )


def _refusal(holder: Holder, path: Path, data_dir: Path) -> str:
    where = f" on {holder.url}" if holder.url else ""
    pid = f" (pid {holder.pid})" if holder.pid is not None else ""
    their_dir = holder.data_dir or str(data_dir.resolve())
    what = (
        f"with data directory {their_dir}"
        if path.name == LOCK_NAME
        else f"on the database {path.with_name(path.name.removesuffix('.lock'))}"
        f" (data directory {their_dir})"
    )
    return (
        f"skiff is already running{where}{pid} {what}; "
        "a data directory and its database belong to one server at a time. "
        "Use that server, stop it first, or start this one with another --data-dir."
    )
