"""The console's page templates (Jinja2, autoescaped) and the filters they format with."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import jinja2
import orjson

from skiff.domain.workers import worker_name

#: JSON longer than this is cut on the page (the API still has all of it).
JSON_SHOWN_MAX = 100_000


def when(ts: float | None) -> str:
    """A stored time as people read it, in UTC (the server does not know the reader's zone)."""
    if ts is None:
        return "—"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(ts: float | None) -> str:
    """The same time for a ``<time datetime>`` attribute."""
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def disk(size: int) -> str:
    """Bytes in the units a volume's size is given in (a GB is 2^30 bytes, ``domain/volumes``),
    so "used" and "size" read alike."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            break
        value /= 1024
    return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"


def pretty(json_text: str | None) -> str:
    """Stored JSON indented for reading, cut past ``JSON_SHOWN_MAX`` characters."""
    if json_text is None:
        return ""
    try:
        text = orjson.dumps(orjson.loads(json_text), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:
        text = json_text
    if len(text) > JSON_SHOWN_MAX:
        return text[:JSON_SHOWN_MAX] + f"\n… ({len(text) - JSON_SHOWN_MAX} more characters)"
    return text


def environment(directory: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        autoescape=jinja2.select_autoescape(("html",)),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        when=when, iso=iso, duration=duration, pretty=pretty, disk=disk, worker_name=worker_name
    )
    return env
