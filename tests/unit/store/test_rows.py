"""Rows read by column name: the same object whatever the order of the columns, from a row
read by name (asyncpg's Record, a dict) or from a plain tuple (sqlite3)."""

from __future__ import annotations

import pytest

from skiff.domain.jobs import JobStatus
from skiff.domain.workers import WorkerKind, WorkerState
from skiff.store.rows import RowReader, job_from_row, worker_from_row, worker_params

JOB_ROW = {
    "seq": 7,
    "caller_id": "u-2",
    "id": "j-1",
    "endpoint_id": "ep-1",
    "status": "IN_PROGRESS",
    "input": '{"n":1}',
    "execution_timeout_ms": 600_000,
    "ttl_ms": 86_400_000,
    "low_priority": 1,
    "webhook": None,
    "s3_config": None,
    "submitted_at": 1.0,
    "started_at": 2.0,
    "finished_at": None,
    "output": None,
    "error": None,
    "worker_id": "w-1",
    "attempt": 1,
    "retries": 0,
    "lease_until": 60.0,
    "stream_cursor": 0,
    "expires_at": None,
    "retention_ms": 1_800_000,
    "retain_until": None,
    "run_deadline": 602.0,
}


def test_a_job_is_the_same_read_by_name_or_from_a_tuple_in_any_column_order() -> None:
    by_name = job_from_row(JOB_ROW)
    columns = tuple(reversed(JOB_ROW))
    from_tuple = job_from_row.for_columns(columns)(tuple(JOB_ROW[c] for c in columns))
    assert by_name == from_tuple
    assert by_name.status is JobStatus.IN_PROGRESS
    assert by_name.low_priority is True
    assert by_name.seq == 7
    assert by_name.caller_id == "u-2"
    assert by_name.expires_at == float("inf")


def test_a_worker_reads_its_columns_by_name() -> None:
    row = {
        "owner": "r-1",
        "id": "w-1",
        "endpoint_id": "ep-1",
        "kind": "local",
        "state": "idle",
        "version": 2,
        "started_at": 1.0,
        "last_seen": None,
        "idle_since": 1.0,
        "pid": 42,
        "gpu": None,
        "recycle": 0,
        "gpu_ids": None,
        "health_address": "127.0.0.1:9001",
        "address": "127.0.0.1:9000",
    }
    worker = worker_from_row(row)
    assert (worker.id, worker.version, worker.owner, worker.recycle) == ("w-1", 2, "r-1", False)
    assert (worker.address, worker.health_address) == ("127.0.0.1:9000", "127.0.0.1:9001")
    assert worker_from_row.for_columns(tuple(row))(tuple(row.values())) == worker


def test_a_worker_written_is_read_back_the_same_from_the_columns_it_wrote() -> None:
    row = {
        "id": "w-1",
        "endpoint_id": "ep-1",
        "kind": "local",
        "state": "running",
        "version": 3,
        "started_at": 1.0,
        "last_seen": 2.0,
        "idle_since": None,
        "pid": 7,
        "gpu": "NVIDIA A40",
        "recycle": 1,
        "gpu_ids": "0,1",
        "owner": "r-1",
        "address": None,
        "health_address": None,
    }
    worker = worker_from_row(row)
    assert worker.kind is WorkerKind.LOCAL and worker.state is WorkerState.RUNNING
    assert worker.recycle is True
    params = worker_params(worker)
    assert set(params) == set(row)
    # Stored as the drivers bind them: enums by their value, the bool as a bool.
    assert params["kind"] == "local" and params["state"] == "running"
    assert worker_from_row(params) == worker


def test_a_reader_refuses_a_conversion_of_a_column_it_does_not_read() -> None:
    def make(a: int, b: str) -> tuple[int, str]:
        return (a, b)

    reader = RowReader(make, b=str.upper)
    assert reader({"b": "x", "a": 1}) == (1, "X")
    assert reader.for_columns(("b", "a"))(("y", 2)) == (2, "Y")
    with pytest.raises(ValueError, match="not columns"):
        RowReader(make, c=int)
