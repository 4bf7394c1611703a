"""The shared views of domain values: /v1 times, /health, a placement, a stream chunk."""

from __future__ import annotations

import re

import orjson

from skiff.domain.health import Health, health_view
from skiff.domain.jobs import JobCounts
from skiff.domain.placement import Blocker, BlockerCause, placement_view
from skiff.domain.results import CHUNK_TOO_DEEP, WorkerChunk, read_stream_chunk
from skiff.domain.streams import StreamChunk, chunk_view
from skiff.domain.times import iso
from skiff.domain.workers import WorkerState

ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def test_v1_times_are_iso_8601_utc_with_milliseconds_and_z() -> None:
    assert iso(1_795_450_216.123456) == "2026-11-23T16:10:16.123Z"
    assert iso(1_795_450_216) == "2026-11-23T16:10:16.000Z"
    assert ISO_MS.fullmatch(iso(0.5))


def _health(placement: Blocker | None) -> Health:
    workers = dict.fromkeys(WorkerState, 0) | {WorkerState.IDLE: 2, WorkerState.STANDBY: 1}
    counts = JobCounts(in_queue=3, in_progress=1, completed=5, failed=2, timed_out=1)
    return Health(jobs=counts, workers=workers, placement=placement)


def test_health_view_is_the_health_body() -> None:
    assert health_view(_health(None)) == {
        "jobs": {
            "completed": 5,
            "failed": 2,
            "inProgress": 1,
            "inQueue": 3,
            "retried": 0,
            "cancelled": 0,
            "timedOut": 1,
        },
        "workers": {
            "idle": 2,
            "running": 0,
            "initializing": 0,
            "ready": 2,
            "throttled": 0,
            "unhealthy": 0,
            "standby": 1,
        },
    }


def test_a_held_back_endpoint_says_why_in_its_health() -> None:
    blocker = Blocker(BlockerCause.WORKER_LIMIT, "the server runs its 8 workers")
    expected = {"cause": "worker-limit", "reason": "the server runs its 8 workers"}
    assert placement_view(blocker) == expected
    assert health_view(_health(blocker))["placement"] == expected


def test_a_chunk_view_passes_the_stored_json_through() -> None:
    view = chunk_view(StreamChunk(seq=1, output_json='{"a":1}', metrics_json=None))
    assert orjson.dumps(view) == b'{"output":{"a":1}}'
    view = chunk_view(StreamChunk(seq=2, output_json='"x"', metrics_json='{"n":2}'))
    assert orjson.dumps(view) == b'{"output":"x","metrics":{"n":2}}'


def test_a_stream_chunk_is_read_or_refused_when_nested_too_deep() -> None:
    assert read_stream_chunk(b'{"output": 1, "metrics": {"n": 2}}') == WorkerChunk("1", '{"n":2}')
    refused = read_stream_chunk(b'{"output": ' + b"[" * 300 + b"]" * 300 + b"}")
    assert refused.refused == CHUNK_TOO_DEEP
