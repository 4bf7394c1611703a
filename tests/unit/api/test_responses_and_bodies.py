"""JSON answers made without Starlette's header building, and bodies the fast protocol read."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from starlette.requests import Request
from starlette.responses import Response

from skiff.api.body import WHOLE_BODY, read_body
from skiff.api.responses import json_response
from skiff.errors import PayloadTooLarge


@pytest.mark.parametrize(
    ("content", "status"),
    [({"id": "j1", "status": "IN_QUEUE"}, 200), ([], 200), ({"error": "é"}, 400), (None, 404)],
)
def test_a_json_answer_carries_what_starlettes_response_would(content: Any, status: int) -> None:
    ours = json_response(content, status)
    theirs = Response(orjson.dumps(content), status_code=status, media_type="application/json")
    assert (ours.status_code, ours.body, ours.raw_headers) == (
        theirs.status_code,
        theirs.body,
        theirs.raw_headers,
    )
    assert ours.headers["content-type"] == "application/json"
    assert ours.background is None


async def _nothing_more() -> dict[str, Any]:
    raise AssertionError("a body read whole is not received again")


def _request(scope_body: bytes) -> Request:
    return Request({"type": "http", "headers": [], WHOLE_BODY: scope_body}, _nothing_more)


async def test_a_body_read_whole_is_taken_from_the_scope() -> None:
    assert await read_body(_request(b'{"input": 1}'), 100) == b'{"input": 1}'


async def test_a_body_read_whole_over_the_routes_limit_is_refused() -> None:
    with pytest.raises(PayloadTooLarge):
        await read_body(_request(b"x" * 101), 100)
