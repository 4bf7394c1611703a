"""Submission bodies and policies: defaults, bounds, and a 400 that names the field."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from service_stubs import a_job
from skiff.domain.jobs import (
    WEBHOOK_MAX_LENGTH,
    Job,
    JobStatus,
    Policy,
    parse_job_request,
    parse_policy,
    status_view,
    worker_payload,
)
from skiff.domain.json_limits import MAX_JSON_DEPTH
from skiff.errors import Invalid

DEFAULT_EXEC_MS = 123_000


def _body(doc: Any) -> bytes:
    return orjson.dumps(doc)


def _field_of_rejection(body: bytes) -> str | None:
    with pytest.raises(Invalid) as info:
        parse_job_request(body, DEFAULT_EXEC_MS)
    return info.value.field


def _job(**changes: Any) -> Job:
    mine = {"id": "job-1", "endpoint_id": "ep-1", "input_json": '{"prompt":"hi"}'}
    return a_job(**(mine | {"submitted_at": 1000.0} | changes))


# -- parse_job_request: accepted bodies --------------------------------------------------


def test_valid_body_gets_default_policy_with_endpoint_execution_timeout() -> None:
    request = parse_job_request(_body({"input": {"prompt": "hi"}}), DEFAULT_EXEC_MS)
    assert orjson.loads(request.input_json) == {"prompt": "hi"}
    assert request.policy == Policy(
        execution_timeout_ms=DEFAULT_EXEC_MS, ttl_ms=86_400_000, low_priority=False
    )
    assert request.webhook is None
    assert request.s3_config_json is None


def test_explicit_policy_values_are_kept() -> None:
    body = _body(
        {
            "input": {},
            "policy": {"executionTimeout": 5000, "ttl": 10_000, "lowPriority": True},
        }
    )
    request = parse_job_request(body, DEFAULT_EXEC_MS)
    assert request.policy == Policy(execution_timeout_ms=5000, ttl_ms=10_000, low_priority=True)


def test_null_policy_means_all_defaults() -> None:
    request = parse_job_request(_body({"input": {}, "policy": None}), DEFAULT_EXEC_MS)
    assert request.policy.execution_timeout_ms == DEFAULT_EXEC_MS
    assert request.policy.ttl_ms == 86_400_000


@pytest.mark.parametrize(
    "webhook",
    ["http://example.com/hook", "https://hooks.example.org:8443/a/b?c=d"],
    ids=["http", "https-with-port-and-query"],
)
def test_absolute_http_webhook_is_accepted(webhook: str) -> None:
    request = parse_job_request(_body({"input": {}, "webhook": webhook}), DEFAULT_EXEC_MS)
    assert request.webhook == webhook


def test_s3_config_with_the_four_string_fields_is_kept_as_json() -> None:
    s3 = {
        "accessId": "AKIA",
        "accessSecret": "secret",
        "bucketName": "bucket",
        "endpointUrl": "https://s3.example.com",
    }
    request = parse_job_request(_body({"input": {}, "s3Config": s3}), DEFAULT_EXEC_MS)
    assert request.s3_config_json is not None
    assert orjson.loads(request.s3_config_json) == s3


# -- parse_job_request: rejected bodies --------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "body"),
        (b"", "body"),
        (_body([1, 2, 3]), "body"),
        (_body("just a string"), "body"),
        (_body({}), "input"),
        (_body({"policy": {}}), "input"),
        (_body({"input": [1, 2]}), "input"),
        (_body({"input": "text"}), "input"),
        (_body({"input": None}), "input"),
        (_body({"input": {}, "policy": "fast"}), "policy"),
        (_body({"input": {}, "policy": {"priority": 1}}), "policy"),
        (_body({"input": {}, "policy": {"ttl": 9999}}), "policy.ttl"),
        (_body({"input": {}, "policy": {"executionTimeout": 4999}}), "policy.executionTimeout"),
        (_body({"input": {}, "policy": {"lowPriority": "yes"}}), "policy.lowPriority"),
        (_body({"input": {}, "webhook": 42}), "webhook"),
        (_body({"input": {}, "webhook": "/relative/path"}), "webhook"),
        (_body({"input": {}, "webhook": "ftp://example.com/x"}), "webhook"),
        (_body({"input": {}, "webhook": "https://"}), "webhook"),
        (_body({"input": {}, "s3Config": "bucket"}), "s3Config"),
        (_body({"input": {}, "s3Config": {"region": "eu"}}), "s3Config.region"),
        (_body({"input": {}, "s3Config": {"accessSecret": 123}}), "s3Config.accessSecret"),
        (_body({"input": {}, "s3Config": {"bucketName": None}}), "s3Config.bucketName"),
    ],
    ids=[
        "not-json",
        "empty-body",
        "list-body",
        "string-body",
        "missing-input",
        "missing-input-with-policy",
        "list-input",
        "string-input",
        "null-input",
        "policy-not-object",
        "policy-unknown-key",
        "ttl-below-min",
        "execution-timeout-below-min",
        "low-priority-not-bool",
        "webhook-not-string",
        "webhook-relative",
        "webhook-ftp",
        "webhook-no-host",
        "s3-not-object",
        "s3-unknown-field",
        "s3-secret-not-string",
        "s3-bucket-null",
    ],
)
def test_bad_body_is_rejected_naming_the_field(body: bytes, field: str) -> None:
    assert _field_of_rejection(body) == field


# -- parse_policy: bounds ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"executionTimeout": 4999}, "policy.executionTimeout"),
        ({"executionTimeout": 604_800_001}, "policy.executionTimeout"),
        ({"ttl": 9999}, "policy.ttl"),
        ({"ttl": 604_800_001}, "policy.ttl"),
        ({"executionTimeout": True}, "policy.executionTimeout"),
        ({"ttl": False}, "policy.ttl"),
        ({"executionTimeout": 5000.0}, "policy.executionTimeout"),
        ({"ttl": "10000"}, "policy.ttl"),
        ({"lowPriority": 1}, "policy.lowPriority"),
        ({"ttl": 10_000, "maxRetries": 3}, "policy"),
        ([], "policy"),
    ],
    ids=[
        "exec-4999",
        "exec-over-7-days",
        "ttl-9999",
        "ttl-over-7-days",
        "exec-bool",
        "ttl-bool",
        "exec-float",
        "ttl-string",
        "low-priority-int",
        "unknown-key",
        "not-an-object",
    ],
)
def test_policy_out_of_bounds_or_wrong_type_is_rejected(raw: Any, field: str) -> None:
    with pytest.raises(Invalid) as info:
        parse_policy(raw, DEFAULT_EXEC_MS)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("raw", "execution_ms", "ttl_ms"),
    [
        ({"executionTimeout": 5000}, 5000, 86_400_000),
        ({"executionTimeout": 604_800_000}, 604_800_000, 86_400_000),
        ({"ttl": 10_000}, DEFAULT_EXEC_MS, 10_000),
        ({"ttl": 604_800_000}, DEFAULT_EXEC_MS, 604_800_000),
        ({}, DEFAULT_EXEC_MS, 86_400_000),
        (None, DEFAULT_EXEC_MS, 86_400_000),
    ],
    ids=["exec-min", "exec-max", "ttl-min", "ttl-max", "empty", "none"],
)
def test_policy_bounds_are_inclusive(raw: Any, execution_ms: int, ttl_ms: int) -> None:
    policy = parse_policy(raw, DEFAULT_EXEC_MS)
    assert policy.execution_timeout_ms == execution_ms
    assert policy.ttl_ms == ttl_ms
    assert policy.low_priority is False


def test_policy_unknown_keys_are_named_in_the_message() -> None:
    with pytest.raises(Invalid) as info:
        parse_policy({"zeta": 1, "alpha": 2}, DEFAULT_EXEC_MS)
    assert "alpha, zeta" in info.value.message


# -- status_view ---------------------------------------------------------------------------


def test_status_view_never_contains_s3_config() -> None:
    job = _job(
        status=JobStatus.COMPLETED,
        s3_config_json='{"accessId":"a","accessSecret":"s"}',
        started_at=1001.0,
        finished_at=1003.0,
        output_json='{"ok":true}',
    )
    view = status_view(job, now=2000.0)
    assert "s3Config" not in view
    encoded = orjson.dumps(view).decode()
    assert "accessSecret" not in encoded
    assert "accessId" not in encoded


def test_status_view_of_finished_job_computes_delay_and_execution_in_ms() -> None:
    job = _job(
        status=JobStatus.COMPLETED,
        started_at=1000.250,
        finished_at=1002.0,
        output_json='{"answer":42}',
        worker_id="w-1",
    )
    view = orjson.loads(orjson.dumps(status_view(job, now=5000.0)))
    assert view == {
        "id": "job-1",
        "status": "COMPLETED",
        "delayTime": 250,
        "executionTime": 1750,
        "output": {"answer": 42},
        "workerId": "w-1",
    }


def test_status_view_of_running_job_measures_execution_until_now() -> None:
    job = _job(status=JobStatus.IN_PROGRESS, started_at=1001.0, worker_id="w-1")
    view = status_view(job, now=1004.5)
    assert view["delayTime"] == 1000
    assert view["executionTime"] == 3500
    assert "output" not in view


def test_status_view_of_queued_job_counts_delay_until_now_without_execution_time() -> None:
    view = status_view(_job(), now=1002.0)
    assert view == {"id": "job-1", "status": "IN_QUEUE", "delayTime": 2000}


def test_status_view_of_job_cancelled_in_queue_stops_delay_at_finish() -> None:
    job = _job(status=JobStatus.CANCELLED, finished_at=1000.5)
    view = status_view(job, now=9999.0)
    assert view["delayTime"] == 500
    assert "executionTime" not in view


def test_status_view_shows_error_and_retries_when_set() -> None:
    job = _job(
        status=JobStatus.FAILED,
        started_at=1000.0,
        finished_at=1001.0,
        error="boom",
        retries=2,
    )
    view = status_view(job, now=1001.0)
    assert view["error"] == "boom"
    assert view["retries"] == 2


# -- worker_payload ------------------------------------------------------------------------


def test_worker_payload_carries_id_input_policy_and_s3_config() -> None:
    job = _job(
        low_priority=True,
        ttl_ms=20_000,
        execution_timeout_ms=7000,
        webhook="https://example.com/hook",
        s3_config_json='{"bucketName":"b"}',
    )
    payload = orjson.loads(orjson.dumps(worker_payload(job)))
    assert payload == {
        "id": "job-1",
        "input": {"prompt": "hi"},
        "webhook": "https://example.com/hook",
        "policy": {"executionTimeout": 7000, "ttl": 20_000, "lowPriority": True},
        "s3Config": {"bucketName": "b"},
    }


def test_worker_payload_leaves_out_unset_webhook_and_s3_config() -> None:
    payload = orjson.loads(orjson.dumps(worker_payload(_job())))
    assert set(payload) == {"id", "input", "policy"}


def test_webhook_with_malformed_ipv6_host_is_rejected_naming_the_field() -> None:
    assert _field_of_rejection(_body({"input": {}, "webhook": "http://[oops/hook"})) == "webhook"


def test_a_body_nested_past_the_limit_is_refused_naming_the_body() -> None:
    deep = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(Invalid) as info:
        parse_job_request(b'{"input": {"a": ' + deep.encode() + b"}}", DEFAULT_EXEC_MS)
    assert info.value.field == "body" and "nested deeper than" in info.value.message


@pytest.mark.parametrize("depth", [256, 1023])
def test_a_body_nested_as_orjson_reads_but_cannot_write_is_refused(depth: int) -> None:
    deep = "[" * depth + "]" * depth
    with pytest.raises(Invalid):
        parse_job_request(b'{"input": {"a": ' + deep.encode() + b"}}", DEFAULT_EXEC_MS)


def test_an_unknown_top_level_field_is_refused_naming_it() -> None:
    body = _body({"input": {}, "webhok": "https://example.com/hook", "zz": 1})
    with pytest.raises(Invalid) as info:
        parse_job_request(body, DEFAULT_EXEC_MS)
    assert info.value.field == "webhok"
    assert "webhok, zz" in info.value.message


def test_every_field_the_sdk_passes_on_is_accepted() -> None:
    # runpod.Endpoint.run/run_sync send the caller's dict as it is when it has "input".
    body = {
        "input": {"prompt": "hi"},
        "webhook": "https://example.com/hook",
        "policy": {"executionTimeout": 60_000, "ttl": 600_000, "lowPriority": True},
        "s3Config": {"accessId": "a", "accessSecret": "s", "bucketName": "b", "endpointUrl": "u"},
    }
    request = parse_job_request(_body(body), DEFAULT_EXEC_MS)
    assert request.webhook == "https://example.com/hook" and request.policy.low_priority


@pytest.mark.parametrize(
    "webhook", ["https://example.com/a\x00b", "https://example.com/a b", "https://x\n.example/"]
)
def test_a_webhook_with_a_nul_space_or_control_character_is_refused(webhook: str) -> None:
    assert _field_of_rejection(_body({"input": {}, "webhook": webhook})) == "webhook"


def test_a_webhook_longer_than_the_limit_is_refused() -> None:
    webhook = "https://example.com/" + "a" * WEBHOOK_MAX_LENGTH
    assert _field_of_rejection(_body({"input": {}, "webhook": webhook})) == "webhook"
