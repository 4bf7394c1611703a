"""One nesting limit for every JSON body: deep enough for real data, shallow enough that what
skiff stores can always be written back out by orjson (which writes at most 255 levels)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from skiff.domain.json_limits import (
    MAX_JSON_DEPTH,
    ORJSON_WRITE_DEPTH,
    loads,
    nesting_exceeds,
    too_deep,
)


def nested(depth: int, leaf: Any = 1) -> Any:
    """``depth`` containers inside one another, objects and arrays in turn."""
    doc = leaf
    for level in range(depth):
        doc = {"k": doc} if level % 2 else [doc]
    return doc


@pytest.mark.parametrize("depth", [0, 1, 2, MAX_JSON_DEPTH])
def test_a_document_up_to_the_limit_is_accepted(depth: int) -> None:
    raw = orjson.dumps(nested(depth))
    doc, deep = loads(raw)
    assert doc == nested(depth) and not deep


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 256, 1023])
def test_a_document_past_the_limit_is_too_deep(depth: int) -> None:
    text = "[" * depth + "]" * depth
    assert loads(text.encode())[1]


def test_a_document_past_orjsons_own_reading_limit_is_too_deep_not_invalid() -> None:
    assert loads(b"[" * 2000 + b"]" * 2000) == (None, True)


def test_text_that_is_not_json_is_still_a_decode_error() -> None:
    with pytest.raises(orjson.JSONDecodeError):
        loads(b"{nope")


def test_what_the_limit_accepts_orjson_can_write_with_wrappers_around_it() -> None:
    # The deepest accepted document, wrapped as a job and its OpenAI input are.
    wrapped = {"input": {"openai_input": nested(MAX_JSON_DEPTH)}}
    assert orjson.loads(orjson.dumps(wrapped)) == wrapped


def test_many_brackets_side_by_side_are_not_depth() -> None:
    wide = [[{"a": []}] for _ in range(5 * MAX_JSON_DEPTH)]
    raw = orjson.dumps(wide)
    assert not too_deep(raw, wide) and not nesting_exceeds(wide)


def test_brackets_inside_strings_do_not_make_a_document_deep() -> None:
    doc = {"text": "[" * 1000}
    assert not too_deep(orjson.dumps(doc), doc)


def test_orjson_writes_exactly_as_deep_as_the_check_counts_on() -> None:
    # nesting_exceeds lets orjson count: it relies on this exact writing limit.
    assert orjson.dumps(nested(ORJSON_WRITE_DEPTH))
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(nested(ORJSON_WRITE_DEPTH + 1))


@pytest.mark.parametrize("limit", [1, 64, MAX_JSON_DEPTH, ORJSON_WRITE_DEPTH])
def test_nesting_exceeds_counts_exactly_to_its_limit(limit: int) -> None:
    assert not nesting_exceeds(nested(limit), limit)
    assert nesting_exceeds(nested(limit + 1), limit)
    assert not nesting_exceeds("scalar", limit)
