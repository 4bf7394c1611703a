"""What a worker's job-done body means: a progress update, a result or an error."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import orjson

from skiff.domain import json_limits

#: Why a job whose result is nested too deep failed: it was not stored, and the job says so.
RESULT_TOO_DEEP = f"the worker's result is {json_limits.TOO_DEEP}; it was not stored"
CHUNK_TOO_DEEP = f"a stream chunk of the worker is {json_limits.TOO_DEEP}; it was not stored"


class Outcome(enum.Enum):
    #: ``progress_update``: the job stays IN_PROGRESS and shows this output.
    PROGRESS = "progress"
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class WorkerResult:
    outcome: Outcome
    output_json: str | None
    error: str | None
    #: The handler asked for its worker to be recycled (``refresh_worker``).
    stop_pod: bool
    #: The body could not be stored as sent (the job fails with ``error``): tell the worker.
    refused: bool = False


def parse_worker_result(body: bytes) -> WorkerResult:
    """Read a job-done body, which the SDK sends as JSON whatever its content type.

    A body that is not JSON (or not an object) still ends the job, as FAILED with a
    message that says so: a result the platform cannot read must not leave a job hanging.
    """
    try:
        doc, too_deep = json_limits.loads(body) if body.strip() else ({}, False)
    except orjson.JSONDecodeError:
        return WorkerResult(
            Outcome.FAILED, None, "the worker sent a result that is not JSON", False
        )
    if too_deep:
        # Even a progress update: what the job would show cannot be written back out.
        return WorkerResult(Outcome.FAILED, None, RESULT_TOO_DEEP, False, refused=True)
    if not isinstance(doc, dict):
        return WorkerResult(Outcome.COMPLETED, orjson.dumps(doc).decode(), None, False)
    stop_pod = doc.get("stopPod") is True
    output_json = orjson.dumps(doc["output"]).decode() if "output" in doc else None
    if doc.get("status") == "IN_PROGRESS":
        return WorkerResult(Outcome.PROGRESS, output_json, None, stop_pod)
    error = doc.get("error")
    if error is not None and error != "":
        message = error if isinstance(error, str) else orjson.dumps(error).decode()
        # PostgreSQL text cannot hold NUL: the message keeps its place, marked as replaced.
        message = message.replace("\x00", "\ufffd")
        return WorkerResult(Outcome.FAILED, output_json, message, stop_pod)
    return WorkerResult(Outcome.COMPLETED, output_json, None, stop_pod)


#: The most a job's stream holds unless ``SKIFF_STREAM_MAX_MB`` says otherwise (its default).
DEFAULT_STREAM_MAX_BYTES = 256 * 1024 * 1024


#: Address space the helper that parses large bodies may take (``SKIFF_LARGE_BODY_MEMORY_MB``'s
#: default): a 64 MB body of one long string or of a few million numbers reads in a few
#: hundred MB; one of tens of millions of tiny values does not.
PARSE_MEMORY_LIMIT = 2 * 1024 * 1024 * 1024


def too_large_to_read(what: str) -> str:
    """Why a worker's large result or stream chunk was not stored: reading it would take more
    memory than a body may (services/large_bodies.py)."""
    return (
        f"the worker's {what} holds too many values to read within the memory one body may "
        "take; it was not stored"
    )


class StreamFull(Exception):
    """A stream chunk would take its job's stream past the most it may hold: nothing of it is
    kept, and the job fails (``stream_full_reason``)."""


def stream_size(chunks: list[tuple[str, str | None]]) -> int:
    """What stream pieces (output JSON, metrics JSON) count against their job's cap and their
    endpoint owner's share: the UTF-8 bytes of their stored JSON."""
    return sum(utf8_length(output) + utf8_length(metrics or "") for output, metrics in chunks)


def utf8_length(text: str) -> int:
    """The bytes ``text`` takes in UTF-8, as the store counts it."""
    # ``isascii`` reads a flag of the string: only text that is not ASCII is encoded to count.
    return len(text) if text.isascii() else len(text.encode())


def stream_full_reason(max_size: int) -> str:
    return (
        f"the job's stream passed the {max_size // (1024 * 1024)} MiB a job's stream may hold; "
        "the chunks before it were kept"
    )


class ChunkTooDeep(ValueError):
    """A stream chunk nested past the limit: it cannot be stored, so its job fails."""


def parse_stream_chunk(body: bytes) -> tuple[str, str | None]:
    """A job-stream body ``{"output": chunk, "metrics"?: {...}}`` -> (output JSON, metrics JSON).

    Raises ``ChunkTooDeep`` for a body nested past ``json_limits.MAX_JSON_DEPTH``."""
    try:
        doc, too_deep = json_limits.loads(body)
    except orjson.JSONDecodeError:
        return orjson.dumps(body.decode("utf-8", "replace")).decode(), None
    if too_deep:
        raise ChunkTooDeep(CHUNK_TOO_DEEP)
    if isinstance(doc, dict) and "output" in doc:
        metrics = doc.get("metrics")
        metrics_json = orjson.dumps(metrics).decode() if isinstance(metrics, dict) else None
        return orjson.dumps(doc["output"]).decode(), metrics_json
    return orjson.dumps(doc).decode(), None


@dataclass(frozen=True, slots=True)
class WorkerChunk:
    """A job-stream body as read: the chunk, or why it cannot be stored."""

    output_json: str
    metrics_json: str | None
    #: The chunk is nested too deep to store: its job fails with this reason. Dropping it
    #: silently would hand the client a stream with a hole in it.
    refused: str | None = None


def read_stream_chunk(body: bytes) -> WorkerChunk:
    """``parse_stream_chunk``, with a chunk nested too deep as a refusal rather than raised."""
    try:
        output_json, metrics_json = parse_stream_chunk(body)
    except ChunkTooDeep as exc:
        return WorkerChunk("null", None, refused=str(exc))
    return WorkerChunk(output_json, metrics_json)
