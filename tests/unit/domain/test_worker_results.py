"""Job-done and job-stream bodies as the runpod SDK sends them."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from skiff.domain.json_limits import MAX_JSON_DEPTH
from skiff.domain.results import (
    RESULT_TOO_DEEP,
    ChunkTooDeep,
    Outcome,
    WorkerResult,
    parse_stream_chunk,
    parse_worker_result,
)


def _parse(doc: Any) -> WorkerResult:
    return parse_worker_result(orjson.dumps(doc))


def test_output_body_completes_the_job_with_that_output() -> None:
    result = _parse({"output": {"text": "hello"}})
    assert result == WorkerResult(Outcome.COMPLETED, '{"text":"hello"}', None, False)


def test_scalar_output_is_kept_as_json() -> None:
    assert _parse({"output": "plain"}).output_json == '"plain"'
    assert _parse({"output": 0}).output_json == "0"


def test_explicit_null_output_completes_with_json_null() -> None:
    result = _parse({"output": None})
    assert result.outcome is Outcome.COMPLETED
    assert result.output_json == "null"


def test_empty_object_completes_with_no_output() -> None:
    result = _parse({})
    assert result == WorkerResult(Outcome.COMPLETED, None, None, False)


def test_empty_body_completes_with_no_output() -> None:
    result = parse_worker_result(b"  ")
    assert result == WorkerResult(Outcome.COMPLETED, None, None, False)


def test_error_with_output_fails_the_job_and_keeps_the_output() -> None:
    result = _parse({"output": {"partial": [1, 2]}, "error": "handler crashed"})
    assert result.outcome is Outcome.FAILED
    assert result.error == "handler crashed"
    assert result.output_json == '{"partial":[1,2]}'


def test_error_as_json_string_fails_with_that_exact_string() -> None:
    sdk_error = orjson.dumps(
        {"error_type": "<class 'ValueError'>", "error_message": "bad", "error_traceback": "..."}
    ).decode()
    result = _parse({"error": sdk_error})
    assert result.outcome is Outcome.FAILED
    assert result.error == sdk_error
    assert result.output_json is None


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ({"code": 7, "reason": "oom"}, '{"code":7,"reason":"oom"}'),
        (["a", "b"], '["a","b"]'),
        (42, "42"),
        (False, "false"),
    ],
    ids=["object", "list", "number", "false"],
)
def test_non_string_error_is_json_encoded(error: Any, expected: str) -> None:
    result = _parse({"error": error})
    assert result.outcome is Outcome.FAILED
    assert result.error == expected


def test_empty_string_error_is_not_a_failure() -> None:
    result = _parse({"output": 1, "error": ""})
    assert result.outcome is Outcome.COMPLETED
    assert result.error is None


def test_in_progress_status_is_a_progress_update() -> None:
    result = _parse({"status": "IN_PROGRESS", "output": {"step": 3}})
    assert result == WorkerResult(Outcome.PROGRESS, '{"step":3}', None, False)


def test_progress_update_ignores_an_error_field() -> None:
    result = _parse({"status": "IN_PROGRESS", "output": "50%", "error": "ignored"})
    assert result.outcome is Outcome.PROGRESS
    assert result.error is None


@pytest.mark.parametrize(
    ("doc", "outcome"),
    [
        ({"output": 1, "stopPod": True}, Outcome.COMPLETED),
        ({"error": "x", "stopPod": True}, Outcome.FAILED),
        ({"status": "IN_PROGRESS", "output": 1, "stopPod": True}, Outcome.PROGRESS),
    ],
    ids=["completed", "failed", "progress"],
)
def test_stop_pod_true_asks_for_recycling(doc: dict[str, Any], outcome: Outcome) -> None:
    result = _parse(doc)
    assert result.outcome is outcome
    assert result.stop_pod is True


@pytest.mark.parametrize("value", [False, "true", 1, None], ids=repr)
def test_stop_pod_only_counts_when_exactly_true(value: Any) -> None:
    assert _parse({"output": 1, "stopPod": value}).stop_pod is False


@pytest.mark.parametrize("body", [b"{oops", b"not json at all", b'{"output": '], ids=repr)
def test_invalid_json_fails_the_job_with_a_message(body: bytes) -> None:
    result = parse_worker_result(body)
    assert result.outcome is Outcome.FAILED
    assert result.output_json is None
    assert result.error is not None
    assert "not JSON" in result.error
    assert result.stop_pod is False


@pytest.mark.parametrize(
    ("doc", "output_json"),
    [([1, "two", {"three": 3}], '[1,"two",{"three":3}]'), ("bare", '"bare"'), (5, "5")],
    ids=["list", "string", "number"],
)
def test_non_object_json_body_completes_with_the_body_as_output(doc: Any, output_json: str) -> None:
    result = _parse(doc)
    assert result == WorkerResult(Outcome.COMPLETED, output_json, None, False)


# -- parse_stream_chunk ------------------------------------------------------------------


def test_stream_chunk_output_without_metrics() -> None:
    assert parse_stream_chunk(b'{"output": {"token": "he"}}') == ('{"token":"he"}', None)


def test_stream_chunk_output_with_metrics() -> None:
    body = orjson.dumps({"output": "tok", "metrics": {"tokens": 1, "ms": 12.5}})
    output_json, metrics_json = parse_stream_chunk(body)
    assert output_json == '"tok"'
    assert metrics_json is not None
    assert orjson.loads(metrics_json) == {"tokens": 1, "ms": 12.5}


def test_stream_chunk_non_object_metrics_are_dropped() -> None:
    assert parse_stream_chunk(b'{"output": 1, "metrics": [1, 2]}') == ("1", None)


def test_stream_chunk_without_output_key_is_the_whole_document() -> None:
    assert parse_stream_chunk(b'{"text": "x"}') == ('{"text":"x"}', None)


def test_stream_chunk_that_is_not_json_is_kept_as_a_string() -> None:
    assert parse_stream_chunk(b"raw text") == ('"raw text"', None)


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 256, 1023, 2000])
def test_a_result_nested_too_deep_fails_the_job_saying_so(depth: int) -> None:
    result = parse_worker_result(b'{"output": ' + _deep(depth) + b"}")
    assert result.outcome is Outcome.FAILED and result.refused
    assert result.output_json is None
    assert result.error == RESULT_TOO_DEEP and "nested deeper than" in result.error


def test_a_progress_update_nested_too_deep_fails_the_job_too() -> None:
    body = b'{"status": "IN_PROGRESS", "output": ' + _deep(300) + b"}"
    assert parse_worker_result(body).outcome is Outcome.FAILED


def test_a_result_at_the_limit_is_kept() -> None:
    result = parse_worker_result(b'{"output": ' + _deep(MAX_JSON_DEPTH - 1) + b"}")
    assert result.outcome is Outcome.COMPLETED and not result.refused


def test_a_nul_in_an_error_message_is_replaced_so_any_store_holds_it() -> None:
    result = _parse({"error": "bad\x00thing"})
    assert result.outcome is Outcome.FAILED and result.error == "bad\ufffdthing"


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 300, 2000])
def test_a_stream_chunk_nested_too_deep_is_refused(depth: int) -> None:
    with pytest.raises(ChunkTooDeep, match="nested deeper than"):
        parse_stream_chunk(b'{"output": ' + _deep(depth) + b"}")
