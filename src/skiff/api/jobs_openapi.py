"""OpenAPI fragments describing the job interface's bodies, parameters and answers.

The routes parse their bodies by hand (fast, and with errors that name the field), so FastAPI
cannot infer these; they are written out here so ``/v2/openapi.json`` tells the whole truth.
"""

from __future__ import annotations

from typing import Any

from skiff.domain.placement import BlockerCause

_MS_7_DAYS = 604_800_000
_STATES = ["IN_QUEUE", "IN_PROGRESS", "COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"]


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _obj(required: list[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": props}


_STATUS = {"type": "string", "enum": _STATES}
_ID_STATUS = _obj(["id", "status"], id={"type": "string"}, status=_STATUS)
_ISO = {"type": "string", "format": "date-time", "nullable": True}

#: Present only while something holds the endpoint's workers back.
PLACEMENT = _obj(
    ["cause", "reason"],
    cause={"type": "string", "enum": [c.value for c in BlockerCause]},
    reason={"type": "string", "description": "Why its workers are not running, in words"},
)

JOB_VIEW = _obj(
    ["id", "status"],
    id={"type": "string"},
    status=_STATUS,
    delayTime={"type": "integer", "description": "ms from submission to a worker taking it"},
    executionTime={"type": "integer", "description": "ms the handler ran (so far)"},
    output={"description": "The handler's result, or its latest progress update"},
    error={"type": "string"},
    workerId={"type": "string"},
    retries={"type": "integer"},
    placement={
        **PLACEMENT,
        "description": "Only while the job waits in the queue and the endpoint's workers are "
        "held back: why",
    },
)

_POLICY: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "executionTimeout": {"type": "integer", "minimum": 5000, "maximum": _MS_7_DAYS},
        "ttl": {"type": "integer", "minimum": 10000, "maximum": _MS_7_DAYS},
        "lowPriority": {"type": "boolean"},
    },
}
_S3_CONFIG: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        k: {"type": "string"} for k in ("accessId", "accessSecret", "bucketName", "endpointUrl")
    },
}

JOB_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    **_obj(
                        ["input"],
                        input={"type": "object", "description": "Handed to the handler"},
                        webhook={
                            "type": "string",
                            "maxLength": 2048,
                            "description": "http(s) URL called when final",
                        },
                        policy=_POLICY,
                        s3Config=_S3_CONFIG,
                    ),
                    # Unknown fields are refused (a typo must not be lost without a word).
                    "additionalProperties": False,
                    "description": "JSON nested deeper than 128 levels is refused",
                }
            }
        },
    }
}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


RUNSYNC_EXTRA: dict[str, Any] = {
    **JOB_BODY,
    "parameters": [
        _query(
            "wait",
            {"type": "integer", "minimum": 1000, "maximum": 300000},
            "ms to wait for the result (default 90000)",
        )
    ],
}
STATUS_EXTRA: dict[str, Any] = {
    "parameters": [
        _query(
            "ttl",
            {"type": "integer", "minimum": 1, "maximum": _MS_7_DAYS},
            "sets this job's time to live (ms from submission); needs a key with `read_write` "
            "on the endpoint",
        )
    ]
}
REQUESTS_EXTRA: dict[str, Any] = {
    "parameters": [
        _query("limit", {"type": "integer", "minimum": 1, "maximum": 200}, "page size (50)"),
        _query("cursor", {"type": "string"}, "`nextCursor` of the previous page"),
    ]
}

#: A job refused for want of room: nothing of it was kept (services/disk_reserve.py, and the
#: user's own share, services/job_room.py).
_NO_ROOM: dict[int | str, dict[str, Any]] = {
    507: {
        "description": "The server's disk is (nearly) full, or the caller's jobs hold the share "
        "of the database one user may (`SKIFF_JOB_MB_PER_USER`): the job was not accepted; "
        "retry after the `Retry-After` header's seconds",
        "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds"}},
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
}
RUN_RESPONSES: dict[int | str, dict[str, Any]] = {200: _json(_ID_STATUS, "Queued"), **_NO_ROOM}
RUNSYNC_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: _json(JOB_VIEW, "The finished job, or `{id, status}` when `wait` elapsed first"),
    **_NO_ROOM,
}
STATUS_RESPONSES: dict[int | str, dict[str, Any]] = {200: _json(JOB_VIEW)}
STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: _json(
        _obj(
            ["id", "status", "stream"],
            id={"type": "string"},
            status=_STATUS,
            error={"type": "string"},
            stream={
                "type": "array",
                "items": _obj(["output"], output={}, metrics={"type": "object"}),
            },
        )
    )
}
ID_STATUS_RESPONSES: dict[int | str, dict[str, Any]] = {200: _json(_ID_STATUS)}
PURGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: _json(
        _obj(
            ["removed", "status"],
            removed={"type": "integer"},
            status={"type": "string", "enum": ["completed"]},
        )
    )
}
_COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}
HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: _json(_obj(["jobs", "workers"], jobs=_COUNTS, workers=_COUNTS, placement=PLACEMENT))
}
REQUESTS_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: _json(
        _obj(
            ["requests", "nextCursor"],
            requests={
                "type": "array",
                "items": _obj(
                    ["id", "status"],
                    id={"type": "string"},
                    status=_STATUS,
                    submittedAt=_ISO,
                    startedAt=_ISO,
                    finishedAt=_ISO,
                    retries={"type": "integer"},
                ),
            },
            nextCursor={"type": "string", "nullable": True},
        )
    )
}
