"""The on-disk shape of a worker's log, shared by its writer (``services/log_writer.py``) and its
reader (``services/log_reader.py``); where the files live is ``services/logs.py``'s to say.

A log is ``WORKER.log`` plus up to N rotated files ``WORKER.log.1`` (newer) … ``WORKER.log.N``
(oldest). Each line is the worker's raw output prefixed by the UTC time it was read and a space:
``2026-11-22T04:10:00.123Z hello``. Lines written before this format existed have no prefix.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: A longer line is cut into pieces of this size, so one line never holds more memory than this.
MAX_LINE_BYTES = 64 * 1024

#: ``YYYY-MM-DDTHH:MM:SS.mmmZ``
STAMP_LEN = 24
_STAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")
#: What a worker id or an endpoint id may look like in a path: nothing that leaves the folder.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")


@dataclass(frozen=True, slots=True)
class LogLine:
    worker: str
    #: Epoch seconds when skiff read the line from the worker; None for unstamped lines.
    time: float | None
    line: str


@dataclass(frozen=True, slots=True)
class LogQuery:
    """The lines of an endpoint's log a caller asks for: one ``worker``'s (None: every
    worker's), stamped at or after ``since`` (None: any), the last ``tail`` of them."""

    endpoint_id: str
    worker: str | None
    since: float | None
    tail: int


@functools.lru_cache(maxsize=4)
def _second(whole: int) -> bytes:
    return dt.datetime.fromtimestamp(whole, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.").encode()


def stamp(ts: float) -> bytes:
    """The prefix of a line read at ``ts`` (epoch seconds), trailing space included."""
    # Every batch of a worker's output is stamped: the date and time of day are formatted
    # once per second, only the milliseconds each time.
    whole = math.floor(ts)
    micros = round((ts - whole) * 1_000_000)  # as datetime.fromtimestamp rounds
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    return _second(whole) + b"%03dZ " % (micros // 1000)


def iso(ts: float) -> str:
    """``ts`` the way log lines carry it (milliseconds, ``Z``)."""
    return stamp(ts)[:-1].decode()


def parse(raw: bytes) -> tuple[float | None, str]:
    """A stored line (without its newline) as (time, text). Undecodable bytes become U+FFFD."""
    if _STAMP.match(raw):
        try:
            moment = dt.datetime.fromisoformat(raw[:STAMP_LEN].decode())
        except ValueError:
            pass  # shaped like a stamp, but no real time (month 13): part of the line
        else:
            return moment.timestamp(), raw[STAMP_LEN + 1 :].decode("utf-8", "replace")
    return None, raw.decode("utf-8", "replace")


def log_name(worker_id: str) -> str:
    """The file name of a worker's (current) log."""
    return f"{worker_id}.log"


def worker_names(names: Iterable[str]) -> list[str]:
    """The ids of the workers whose logs are among the file ``names`` of a folder, sorted."""
    return sorted(n[:-4] for n in names if n.endswith(".log") and safe_name(n[:-4]))


def worker_of_file(name: str) -> str | None:
    """The worker whose log (``WORKER.log``) or rotated log (``WORKER.log.N``) is the file
    ``name``; None for any other file."""
    stem, dot, suffix = name.rpartition(".")
    if dot and suffix.isdigit() and stem.endswith(".log"):
        name = stem
    worker = name[:-4]
    return worker if name.endswith(".log") and safe_name(worker) else None


def rotated(path: Path, n: int) -> Path:
    """The ``n``-th rotated file of ``path`` (1 = the newest)."""
    return path.with_name(f"{path.name}.{n}")


def safe_name(name: str) -> bool:
    return _SAFE_NAME.fullmatch(name) is not None


def parse_time(text: str) -> float:
    """Epoch seconds from ``text``: epoch seconds themselves, or an ISO-8601 time (UTC when
    it names no zone). Raises ValueError for anything else."""
    try:
        value = float(text)
    except ValueError:
        moment = dt.datetime.fromisoformat(text.strip())
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return moment.timestamp()
    if not math.isfinite(value):
        raise ValueError(f"not a time: {text}")
    return value
