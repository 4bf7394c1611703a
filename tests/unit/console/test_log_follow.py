"""The follow of a log page (console/log_pages.py), as worker logs and a pod's log both
answer it: the lines since the last one the script has, within the tail asked for."""

from __future__ import annotations

import orjson
import pytest
from starlette.requests import Request

from skiff.console.log_pages import TAIL_DEFAULT, lines_answer, since_of, tail_of
from skiff.domain.logs import LogLine


def asking(query: str) -> Request:
    return Request({"type": "http", "method": "GET", "query_string": query.encode()})


@pytest.mark.parametrize(
    ("query", "since"),
    [("since=12.5", 12.5), ("since=3", 3.0), ("", None), ("since=", None), ("since=soon", None)],
)
def test_the_follow_asks_since_a_time_or_from_the_start(query: str, since: float | None) -> None:
    assert since_of(asking(query)) == since


@pytest.mark.parametrize(
    ("query", "tail"), [("tail=50", 50), ("tail=51", TAIL_DEFAULT), ("tail=-1", TAIL_DEFAULT)]
)
def test_the_tail_is_one_of_the_choices_or_the_default(query: str, tail: int) -> None:
    assert tail_of(asking(query)) == tail


def test_the_answer_is_the_lines_as_the_script_reads_them() -> None:
    answer = lines_answer([LogLine("w1", 0.0, "ready"), LogLine("w1", None, "no time")])
    assert answer.headers["cache-control"] == "no-store"
    assert orjson.loads(answer.body) == {
        "lines": [
            {"worker": "w1", "time": 0.0, "stamp": "1970-01-01T00:00:00.000Z", "line": "ready"},
            {"worker": "w1", "time": None, "stamp": "", "line": "no time"},
        ]
    }
