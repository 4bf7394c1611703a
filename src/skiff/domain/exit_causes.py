"""Why a worker ended at its start, in one short line taken from the end of its own log: pure.

A worker that cannot start (its command does not exist, its handler fails on import, an
interpreter without ``runpod``) says why in the last thing it prints: a Python traceback ends
with the exception (``ModuleNotFoundError: No module named 'runpod'``), the sandbox with
``bwrap: execvp …: No such file or directory``. That line joins the endpoint's failure, so
``/health``, a queued job's ``/status`` and ``/v1`` say the cause where the caller looks, not
only "exited with code 1". It comes from that worker's log alone, which only its endpoint's
owner reads anyway.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: The most of the line shown: enough for an exception and its message, not a dump.
MAX_CAUSE_CHARS = 240

#: What skiff itself writes into a worker's log (a container's pull progress): never the
#: worker's own reason.
_SKIFF_NOTE = "[skiff] "
#: Terminal escapes (colours, cursor moves) of a worker that logs for a terminal.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
#: A traceback's markers (``^^^^^``, ``~~~^~~``) and rules (``-----``) say nothing by themselves.
_WORDS = re.compile(r"\w")


def _shown(line: str) -> str:
    # A progress bar rewrites its line with carriage returns: what is left on screen is the last.
    text = _ESCAPES.sub("", line).rsplit("\r", 1)[-1]
    return _CONTROLS.sub("", text).strip()


def exit_cause(lines: Sequence[str]) -> str | None:
    """The last line of ``lines`` (a worker's log, oldest first) that says something, cut to
    ``MAX_CAUSE_CHARS``; None when none does."""
    for line in reversed(lines):
        text = _shown(line)
        if not text or text.startswith(_SKIFF_NOTE) or not _WORDS.search(text):
            continue
        if len(text) > MAX_CAUSE_CHARS:
            return text[: MAX_CAUSE_CHARS - 1].rstrip() + "…"
        return text
    return None
