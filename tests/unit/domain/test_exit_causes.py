"""The line of a worker's log that says why it ended at its start."""

from __future__ import annotations

import pytest

from skiff.domain.exit_causes import MAX_CAUSE_CHARS, exit_cause

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/app/handler.py", line 1, in <module>',
    "    import runpod",
    "ModuleNotFoundError: No module named 'runpod'",
]


@pytest.mark.parametrize(
    ("lines", "cause"),
    [
        (TRACEBACK, "ModuleNotFoundError: No module named 'runpod'"),
        # Trailing blank lines, a traceback's markers and skiff's own notes say nothing.
        ([*TRACEBACK, "", "   "], "ModuleNotFoundError: No module named 'runpod'"),
        (
            ["SyntaxError: invalid syntax", "    ^^^^^", "-----"],
            "SyntaxError: invalid syntax",
        ),
        (
            ["bwrap: execvp no-such-command: No such file or directory"],
            "bwrap: execvp no-such-command: No such file or directory",
        ),
        (
            ["oops, no weights", "[skiff] pull: abc: Pull complete"],
            "oops, no weights",
        ),
        # Terminal colours and a progress bar's rewrites leave what a terminal would show.
        (["\x1b[31mRuntimeError: CUDA out of memory\x1b[0m"], "RuntimeError: CUDA out of memory"),
        (["loading 10%\rloading 50%\rKilled"], "Killed"),
        ([], None),
        (["", "[skiff] pulling img:1", "^^^"], None),
    ],
)
def test_the_cause_is_the_last_line_that_says_something(
    lines: list[str], cause: str | None
) -> None:
    assert exit_cause(lines) == cause


def test_a_long_line_is_cut_to_a_sane_length() -> None:
    cause = exit_cause(["ValueError: " + "x" * 10_000])
    assert cause is not None and len(cause) == MAX_CAUSE_CHARS
    assert cause.startswith("ValueError: xxx") and cause.endswith("…")
