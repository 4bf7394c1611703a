"""Contract tests of the store adapters: every ``store`` test runs on SQLite (a real database
file) and on PostgreSQL (a fresh schema in the ``test`` database; skipped when no server is
reachable). Tests of one backend's own durability and migrations follow at the end."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from pgtest import PG_DSN, fresh_schema, pg_admin, schema_name
from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import Job, JobStatus
from skiff.domain.permissions import ALL, READ_ONLY, Access, Kind, Permissions
from skiff.domain.public_models import PublicModel
from skiff.domain.quotas import Owned
from skiff.domain.results import StreamFull
from skiff.domain.templates import Template
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.errors import Conflict
from skiff.store import sqlite as sqlite_store
from skiff.store.base import ApiKey, JobCounts, RegistryAuthRecord, Store, StreamChunk, User
from skiff.store.migration_scripts import migrations
from skiff.store.named_queries import Dialect
from skiff.store.postgres import EARLIER_NAMES, PostgresStore
from skiff.store.sealing import OneTimeKey
from skiff.store.sqlite import SQLiteStore

EP = "ep-1"
T0 = 1_700_000_000.0


def make_job(job_id: str, endpoint_id: str = EP, **changes: Any) -> Job:
    fields: dict[str, Any] = {
        "id": job_id,
        "endpoint_id": endpoint_id,
        "status": JobStatus.IN_QUEUE,
        "input_json": f'{{"n":"{job_id}"}}',
        "execution_timeout_ms": 600_000,
        "ttl_ms": 86_400_000,
        "low_priority": False,
        "webhook": None,
        "s3_config_json": None,
        "submitted_at": T0,
    }
    fields.update(changes)
    return Job(**fields)


def make_endpoint(endpoint_id: str = EP, template_id: str = "tpl-1") -> Endpoint:
    return Endpoint(
        id=endpoint_id,
        userId="u-1",
        version=1,
        createdAt=T0,
        spec=EndpointSpec(name=f"name-{endpoint_id}", templateId=template_id),
    )


#: One key for every store of these tests: a store reopened must open what it sealed before.
KEYS = OneTimeKey()


def make_worker(worker_id: str, endpoint_id: str = EP) -> Worker:
    return Worker(
        id=worker_id,
        endpoint_id=endpoint_id,
        kind=WorkerKind.LOCAL,
        state=WorkerState.IDLE,
        version=1,
        started_at=T0,
        idle_since=T0,
        pid=1234,
        gpu="GPU-0",
    )


def make_template(template_id: str, name: str) -> Template:
    return Template(id=template_id, name=name, imageName="example/worker:1")


def make_user(user_id: str = "u-1", name: str = "alice") -> User:
    return User(id=user_id, name=name, is_admin=False, created_at=T0)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "skiff.db"


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    async with fresh_schema() as name:
        yield name


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, db_path: Path) -> AsyncIterator[Store]:
    s: SQLiteStore | PostgresStore
    if request.param == "sqlite":
        s = SQLiteStore(db_path, KEYS)
        await s.open()
        yield s
        await s.close()
        return
    admin = await pg_admin()
    name = schema_name()
    try:
        s = PostgresStore(PG_DSN, schema=name, keys=KEYS)
        await s.open()
        try:
            yield s
        finally:
            await s.close()
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        await admin.close()


async def insert_jobs(store: Store, *jobs: Job) -> None:
    # One at a time: submission order (the seq column) must follow the argument order.
    for job in jobs:
        await store.insert_job(job)


async def claim_one(store: Store, job_id: str, worker_id: str = "w-1") -> Job:
    await store.insert_job(make_job(job_id))
    claimed = await store.claim_jobs(EP, worker_id, 1, now=T0 + 1, lease_until=T0 + 61)
    assert [j.id for j in claimed] == [job_id]
    return claimed[0]


# -- jobs: insert and read ---------------------------------------------------------------


async def test_inserted_job_is_read_back_with_every_field(store: Store) -> None:
    job = make_job(
        "j-1",
        low_priority=True,
        webhook="https://example.com/hook",
        s3_config_json='{"bucketName":"b"}',
        execution_timeout_ms=7000,
        ttl_ms=20_000,
        retention_ms=60_000,
    )
    await store.insert_job(job)
    got = await store.get_job(EP, "j-1")
    assert got is not None and got.seq > 0
    # The store derives the expiry from submission and ttl.
    assert got == replace(job, expires_at=T0 + 20, seq=got.seq)


async def test_get_job_of_another_endpoint_or_unknown_id_is_none(store: Store) -> None:
    await store.insert_job(make_job("j-1"))
    assert await store.get_job("ep-other", "j-1") is None
    assert await store.get_job(EP, "j-missing") is None


async def test_duplicate_job_id_is_refused(store: Store) -> None:
    await store.insert_job(make_job("j-1"))
    with pytest.raises(Exception, match=r"(?i)unique"):
        await store.insert_job(make_job("j-1"))
    assert (await store.job_counts(EP)).in_queue == 1


# -- claim -----------------------------------------------------------------------------------


async def test_claim_gives_normal_priority_before_low_priority(store: Store) -> None:
    await insert_jobs(
        store,
        make_job("low-1", low_priority=True),
        make_job("normal-1"),
        make_job("low-2", low_priority=True),
        make_job("normal-2"),
    )
    claimed = await store.claim_jobs(EP, "w-1", 10, now=T0, lease_until=T0 + 60)
    assert [j.id for j in claimed] == ["normal-1", "normal-2", "low-1", "low-2"]


async def test_claim_hands_oldest_jobs_first(store: Store) -> None:
    await insert_jobs(store, *(make_job(f"j-{i}") for i in range(5)))
    first = await store.claim_jobs(EP, "w-1", 2, now=T0, lease_until=T0 + 60)
    second = await store.claim_jobs(EP, "w-2", 2, now=T0, lease_until=T0 + 60)
    assert [j.id for j in first] == ["j-0", "j-1"]
    assert [j.id for j in second] == ["j-2", "j-3"]


async def test_claim_skips_low_priority_only_while_normal_jobs_wait(store: Store) -> None:
    await insert_jobs(store, make_job("low", low_priority=True), make_job("normal"))
    first = await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
    second = await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
    assert [j.id for j in first] == ["normal"]
    assert [j.id for j in second] == ["low"]


async def test_claim_never_hands_more_than_the_limit(store: Store) -> None:
    await insert_jobs(store, *(make_job(f"j-{i}") for i in range(5)))
    claimed = await store.claim_jobs(EP, "w-1", 3, now=T0, lease_until=T0 + 60)
    assert len(claimed) == 3
    counts = await store.job_counts(EP)
    assert (counts.in_queue, counts.in_progress) == (2, 3)


async def test_claim_on_an_empty_queue_returns_nothing(store: Store) -> None:
    assert await store.claim_jobs(EP, "w-1", 5, now=T0, lease_until=T0 + 60) == []


async def test_claim_only_takes_jobs_of_its_endpoint(store: Store) -> None:
    await insert_jobs(store, make_job("other", endpoint_id="ep-2"), make_job("mine"))
    claimed = await store.claim_jobs(EP, "w-1", 5, now=T0, lease_until=T0 + 60)
    assert [j.id for j in claimed] == ["mine"]
    other = await store.get_job("ep-2", "other")
    assert other is not None
    assert other.status is JobStatus.IN_QUEUE


async def test_claim_sets_status_worker_start_lease_and_attempt(store: Store) -> None:
    await store.insert_job(make_job("j-1"))
    [claimed] = await store.claim_jobs(EP, "w-7", 1, now=T0 + 5, lease_until=T0 + 65)
    stored = await store.get_job(EP, "j-1")
    for job in (claimed, stored):
        assert job is not None
        assert job.status is JobStatus.IN_PROGRESS
        assert job.worker_id == "w-7"
        assert job.started_at == T0 + 5
        assert job.lease_until == T0 + 65
        assert job.attempt == 1
    assert await store.jobs_of_worker("w-7") == ["j-1"]


async def test_concurrent_claims_never_hand_out_one_job_twice(store: Store) -> None:
    await asyncio.gather(*(store.insert_job(make_job(f"j-{i:03}")) for i in range(100)))
    batches = await asyncio.gather(
        *(store.claim_jobs(EP, f"w-{n}", 7, now=T0, lease_until=T0 + 60) for n in range(20))
    )
    claimed_ids = [job.id for batch in batches for job in batch]
    assert len(claimed_ids) == len(set(claimed_ids))
    assert set(claimed_ids) == {f"j-{i:03}" for i in range(100)}
    assert all(len(batch) <= 7 for batch in batches)
    for n, batch in enumerate(batches):
        assert all(job.worker_id == f"w-{n}" for job in batch)
    counts = await store.job_counts(EP)
    assert (counts.in_queue, counts.in_progress) == (0, 100)


# -- progress and finish ---------------------------------------------------------------------


async def test_progress_is_recorded_only_for_the_holding_worker(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    assert await store.record_progress("j-1", "w-1", '{"step":1}') is True
    assert await store.record_progress("j-1", "w-2", '{"step":99}') is False
    job = await store.get_job(EP, "j-1")
    assert job is not None
    assert job.status is JobStatus.IN_PROGRESS
    assert job.output_json == '{"step":1}'


async def test_finish_moves_a_running_job_to_its_final_state(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    done = await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, '{"ok":1}', None, T0 + 9)
    assert done is not None
    assert done.status is JobStatus.COMPLETED
    assert done.output_json == '{"ok":1}'
    assert done.finished_at == T0 + 9
    assert done.lease_until is None
    assert await store.get_job(EP, "j-1") == done
    assert await store.jobs_of_worker("w-1") == []


async def test_finish_by_another_worker_returns_none_and_changes_nothing(
    store: Store,
) -> None:
    before = await claim_one(store, "j-1", "w-1")
    assert await store.finish_job("j-1", "w-2", JobStatus.FAILED, None, "x", T0 + 9) is None
    assert await store.get_job(EP, "j-1") == before


async def test_finish_without_worker_id_is_allowed_for_the_platform(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    timed_out = await store.finish_job("j-1", None, JobStatus.TIMED_OUT, None, "late", T0 + 9)
    assert timed_out is not None
    assert timed_out.status is JobStatus.TIMED_OUT
    assert timed_out.error == "late"


async def test_finish_refuses_a_queued_job(store: Store) -> None:
    await store.insert_job(make_job("j-1"))
    assert await store.finish_job("j-1", None, JobStatus.COMPLETED, "1", None, T0) is None
    job = await store.get_job(EP, "j-1")
    assert job is not None
    assert job.status is JobStatus.IN_QUEUE


async def test_finish_refuses_an_already_final_job(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    first = await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, "1", None, T0 + 2)
    second = await store.finish_job("j-1", "w-1", JobStatus.FAILED, None, "again", T0 + 3)
    assert first is not None
    assert second is None
    assert await store.get_job(EP, "j-1") == first


async def test_finish_of_an_unknown_job_returns_none(store: Store) -> None:
    assert await store.finish_job("nope", None, JobStatus.COMPLETED, None, None, T0) is None


# -- cancel and stop signals -----------------------------------------------------------------


async def test_cancel_of_a_queued_job_needs_no_stop_signal(store: Store) -> None:
    await store.insert_job(make_job("j-1"))
    job = await store.cancel_job(EP, "j-1", T0 + 3)
    assert job is not None
    assert job.status is JobStatus.CANCELLED
    assert job.stop_pending is False
    assert job.finished_at == T0 + 3
    assert await store.claim_jobs(EP, "w-1", 5, now=T0, lease_until=T0 + 60) == []


async def test_cancel_of_a_running_job_flags_a_stop_signal_taken_once(
    store: Store,
) -> None:
    await claim_one(store, "j-1", "w-1")
    job = await store.cancel_job(EP, "j-1", T0 + 3)
    assert job is not None
    assert job.status is JobStatus.CANCELLED
    assert job.stop_pending is True
    assert job.worker_id == "w-1"
    assert job.lease_until is None
    assert await store.take_stop_signals("w-2", T0) == []
    assert await store.take_stop_signals("w-1", T0) == ["j-1"]
    assert await store.take_stop_signals("w-1", T0) == []
    after = await store.get_job(EP, "j-1")
    assert after is not None
    assert after.stop_pending is False


async def test_cancelled_running_job_can_no_longer_be_finished(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    await store.cancel_job(EP, "j-1", T0 + 3)
    assert await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, "1", None, T0 + 4) is None
    job = await store.get_job(EP, "j-1")
    assert job is not None
    assert job.status is JobStatus.CANCELLED


async def test_cancel_of_a_completed_job_returns_it_unchanged(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    done = await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, "1", None, T0 + 2)
    assert await store.cancel_job(EP, "j-1", T0 + 5) == done


async def test_cancel_of_an_unknown_job_or_other_endpoint_is_none(store: Store) -> None:
    await store.insert_job(make_job("j-1"))
    assert await store.cancel_job(EP, "nope", T0) is None
    assert await store.cancel_job("ep-other", "j-1", T0) is None
    job = await store.get_job(EP, "j-1")
    assert job is not None
    assert job.status is JobStatus.IN_QUEUE


# -- retry -----------------------------------------------------------------------------------


@pytest.mark.parametrize("final", [JobStatus.FAILED, JobStatus.TIMED_OUT], ids=str)
async def test_retry_requeues_and_clears_output_error_and_stream(
    store: Store, final: JobStatus
) -> None:
    await claim_one(store, "j-1", "w-1")
    assert await store.append_stream_chunks("j-1", "w-1", [('"old"', None)])
    await store.finish_job("j-1", "w-1", final, '"partial"', "boom", T0 + 2)
    job = await store.retry_job(EP, "j-1")
    assert job is not None
    assert job.status is JobStatus.IN_QUEUE
    assert job.output_json is None
    assert job.error is None
    assert job.worker_id is None
    assert job.started_at is None
    assert job.finished_at is None
    assert job.retries == 1
    assert job.attempt == 0
    assert await store.read_new_stream_chunks("j-1") == []

    [again] = await store.claim_jobs(EP, "w-2", 1, now=T0 + 10, lease_until=T0 + 70)
    assert again.attempt == 1
    assert await store.append_stream_chunks("j-1", "w-2", [('"new"', None)])
    assert await store.read_new_stream_chunks("j-1") == [StreamChunk(1, '"new"', None)]


@pytest.mark.parametrize("state", ["queued", "running", "completed", "cancelled"])
async def test_retry_of_a_job_not_failed_or_timed_out_leaves_it_unchanged(
    store: Store, state: str
) -> None:
    if state == "queued":
        await store.insert_job(make_job("j-1"))
    else:
        await claim_one(store, "j-1", "w-1")
        if state == "completed":
            await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, "1", None, T0 + 2)
        elif state == "cancelled":
            await store.cancel_job(EP, "j-1", T0 + 2)
    before = await store.get_job(EP, "j-1")
    assert await store.retry_job(EP, "j-1") == before


async def test_retry_of_an_unknown_job_is_none(store: Store) -> None:
    assert await store.retry_job(EP, "nope") is None


# -- purge and counts ------------------------------------------------------------------------


async def test_purge_queue_removes_only_queued_jobs_of_the_endpoint(store: Store) -> None:
    await claim_one(store, "running", "w-1")
    await insert_jobs(
        store,
        make_job("q-1"),
        make_job("q-2"),
        make_job("q-3", low_priority=True),
        make_job("other", "ep-2"),
    )
    assert await store.purge_queue(EP) == 3
    assert await store.get_job(EP, "q-1") is None
    assert await store.get_job(EP, "q-3") is None
    assert await store.get_job(EP, "running") is not None
    assert await store.get_job("ep-2", "other") is not None
    assert await store.purge_queue(EP) == 0


async def test_job_counts_by_state_with_retries_and_normal_queue(store: Store) -> None:
    await insert_jobs(
        store,
        make_job("a"),
        make_job("b"),
        make_job("c"),
        make_job("d"),
        make_job("e"),
        make_job("f"),
    )
    # a,b,c,d go to workers; e (normal) and f stay queued; add one low-priority queued job.
    await store.claim_jobs(EP, "w-1", 4, now=T0, lease_until=T0 + 60)
    await store.insert_job(make_job("low", low_priority=True))
    await store.finish_job("a", "w-1", JobStatus.COMPLETED, "1", None, T0 + 1)
    await store.finish_job("b", "w-1", JobStatus.FAILED, None, "x", T0 + 1)
    await store.finish_job("c", "w-1", JobStatus.TIMED_OUT, None, None, T0 + 1)
    await store.cancel_job(EP, "d", T0 + 1)
    await store.retry_job(EP, "c")
    await store.insert_job(make_job("elsewhere", "ep-2"))
    counts = await store.job_counts(EP)
    assert counts == JobCounts(
        in_queue=4,
        in_progress=0,
        completed=1,
        failed=1,
        cancelled=1,
        timed_out=0,
        retried=1,
        in_queue_normal=3,
        oldest_queued_at=T0,
    )


async def test_job_counts_of_an_empty_endpoint_are_zero(store: Store) -> None:
    assert await store.job_counts("ep-empty") == JobCounts()


# -- streams ---------------------------------------------------------------------------------


async def test_stream_chunks_are_accepted_only_from_the_holding_worker(
    store: Store,
) -> None:
    await claim_one(store, "j-1", "w-1")
    assert await store.append_stream_chunks("j-1", "w-2", [('"intruder"', None)]) is False
    assert await store.append_stream_chunks("nope", "w-1", [('"x"', None)]) is False
    assert await store.append_stream_chunks("j-1", "w-1", [('"mine"', None)]) is True
    assert await store.read_new_stream_chunks("j-1") == [StreamChunk(1, '"mine"', None)]


async def test_stream_chunks_are_refused_once_the_job_is_final(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, "1", None, T0 + 1)
    assert await store.append_stream_chunks("j-1", "w-1", [('"late"', None)]) is False
    assert await store.read_new_stream_chunks("j-1") == []


async def test_stream_chunks_after_a_seq_are_read_without_taking_them(store: Store) -> None:
    """What the console's request panel reads: the chunks after the last it showed, while
    ``/stream``'s cursor (the API client's) stays where it was."""
    await claim_one(store, "j-1", "w-1")
    for i in range(3):
        assert await store.append_stream_chunks("j-1", "w-1", [(f'"c{i}"', None)])
    assert [c.seq for c in await store.stream_chunks_after("j-1", 0)] == [1, 2, 3]
    assert [c.output_json for c in await store.stream_chunks_after("j-1", 2)] == ['"c2"']
    assert await store.stream_chunks_after("j-1", 3) == []
    assert await store.stream_chunks_after("nope", 0) == []
    assert [c.seq for c in await store.read_new_stream_chunks("j-1")] == [1, 2, 3]


async def test_new_stream_chunks_are_read_once_and_in_order(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    for i in range(3):
        assert await store.append_stream_chunks("j-1", "w-1", [(f'"c{i}"', None)])
    first = await store.read_new_stream_chunks("j-1")
    assert [(c.seq, c.output_json) for c in first] == [(1, '"c0"'), (2, '"c1"'), (3, '"c2"')]
    assert await store.read_new_stream_chunks("j-1") == []
    assert await store.append_stream_chunks("j-1", "w-1", [('"c3"', '{"tokens":4}')])
    assert await store.read_new_stream_chunks("j-1") == [StreamChunk(4, '"c3"', '{"tokens":4}')]
    assert await store.read_new_stream_chunks("j-1") == []


async def test_stream_chunks_of_one_job_do_not_show_in_another(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    await claim_one(store, "j-2", "w-1")
    await store.append_stream_chunks("j-1", "w-1", [('"one"', None)])
    await store.append_stream_chunks("j-2", "w-1", [('"two"', None)])
    assert await store.read_new_stream_chunks("j-2") == [StreamChunk(1, '"two"', None)]
    assert await store.read_new_stream_chunks("j-1") == [StreamChunk(1, '"one"', None)]


async def test_a_chunk_that_would_pass_the_streams_cap_is_refused_whole(store: Store) -> None:
    """The cap counts what the job's stream already holds: 10 characters of 12 kept, a chunk
    of 4 more is refused and none of its pieces is kept, one of 2 still fits."""
    await claim_one(store, "j-1", "w-1")
    assert await store.append_stream_chunks("j-1", "w-1", [('"abc"', None), ('"d"', "{}")], 12)
    with pytest.raises(StreamFull):
        await store.append_stream_chunks("j-1", "w-1", [('"e"', None), ("1", None)], 12)
    assert await store.append_stream_chunks("j-1", "w-1", [("12", None)], 12)
    assert [c.output_json for c in await store.read_new_stream_chunks("j-1")] == [
        '"abc"',
        '"d"',
        "12",
    ]
    with pytest.raises(StreamFull):
        await store.append_stream_chunks("j-1", "w-1", [("3", None)], 12)
    # Not the holder: refused as before, whatever the size.
    assert await store.append_stream_chunks("j-1", "w-2", [('"xxxxxxxxxxxxxx"', None)], 12) is False


async def test_a_job_run_again_starts_its_stream_cap_afresh(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    assert await store.append_stream_chunks("j-1", "w-1", [('"12345678"', None)], 10)
    await store.release_jobs("w-1", T0 + 10, max_attempts=3, reason="lost")
    await store.claim_jobs(EP, "w-2", 1, now=T0 + 11, lease_until=T0 + 71)
    assert await store.append_stream_chunks("j-1", "w-2", [('"12345678"', None)], 10)
    await store.finish_job("j-1", "w-2", JobStatus.FAILED, None, "boom", T0 + 12)
    assert await store.retry_job(EP, "j-1") is not None
    await store.claim_jobs(EP, "w-3", 1, now=T0 + 13, lease_until=T0 + 73)
    assert await store.append_stream_chunks("j-1", "w-3", [('"12345678"', None)], 10)


# -- leases and lost workers -----------------------------------------------------------------


async def test_release_requeues_a_lost_workers_jobs(store: Store) -> None:
    await claim_one(store, "j-1", "w-lost")
    await claim_one(store, "j-2", "w-other")
    await store.append_stream_chunks("j-1", "w-lost", [('"partial"', None)])
    released = await store.release_jobs("w-lost", T0 + 10, max_attempts=3, reason="lost")
    assert [j.id for j in released] == ["j-1"]
    job = released[0]
    assert job.status is JobStatus.IN_QUEUE
    assert job.worker_id is None
    assert job.started_at is None
    assert job.lease_until is None
    assert job.retries == 1
    assert job.attempt == 1
    assert await store.get_job(EP, "j-1") == job
    other = await store.get_job(EP, "j-2")
    assert other is not None
    assert other.status is JobStatus.IN_PROGRESS
    [again] = await store.claim_jobs(EP, "w-new", 1, now=T0 + 11, lease_until=T0 + 71)
    assert again.id == "j-1"
    assert again.attempt == 2


async def test_release_fails_jobs_that_used_up_their_attempts(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    for attempt in (2, 3):
        await store.release_jobs("w-1", T0 + attempt, max_attempts=3, reason="lost")
        [job] = await store.claim_jobs(EP, "w-1", 1, now=T0 + attempt, lease_until=T0 + 100)
        assert job.attempt == attempt
    [failed] = await store.release_jobs("w-1", T0 + 50, max_attempts=3, reason="worker lost")
    assert failed.status is JobStatus.FAILED
    assert failed.error == "worker lost"
    assert failed.finished_at == T0 + 50
    assert failed.lease_until is None
    assert await store.get_job(EP, "j-1") == failed
    assert await store.claim_jobs(EP, "w-1", 1, now=T0 + 51, lease_until=T0 + 100) == []


async def test_release_uncounted_gives_the_attempt_back_and_fails_none(store: Store) -> None:
    """A worker ended for no fault of its jobs (its owner disabled): even a job on its last
    attempt goes back, to run again with the same number of attempts left."""
    await claim_one(store, "j-1", "w-1")
    [job] = await store.release_jobs("w-1", T0 + 5, max_attempts=1, reason="stopped", counted=False)
    assert job.status is JobStatus.IN_QUEUE and job.error is None
    assert job.attempt == 0 and job.retries == 1
    assert await store.get_job(EP, "j-1") == job
    [again] = await store.claim_jobs(EP, "w-2", 1, now=T0 + 6, lease_until=T0 + 66)
    assert again.attempt == 1
    with pytest.raises(ValueError):
        await store.release_jobs(None, T0 + 100, max_attempts=1, reason="lapsed", counted=False)


async def test_release_without_worker_touches_only_lapsed_leases(store: Store) -> None:
    await store.insert_job(make_job("lapsed"))
    await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 10)
    await store.insert_job(make_job("fresh"))
    await store.claim_jobs(EP, "w-2", 1, now=T0, lease_until=T0 + 100)
    await store.insert_job(make_job("exactly-now"))
    await store.claim_jobs(EP, "w-3", 1, now=T0, lease_until=T0 + 50)
    released = await store.release_jobs(None, T0 + 50, max_attempts=3, reason="lease lapsed")
    assert [j.id for j in released] == ["lapsed"]
    assert released[0].status is JobStatus.IN_QUEUE
    for job_id in ("fresh", "exactly-now"):
        job = await store.get_job(EP, job_id)
        assert job is not None
        assert job.status is JobStatus.IN_PROGRESS


async def test_release_with_nothing_to_release_returns_empty(store: Store) -> None:
    await store.insert_job(make_job("queued"))
    assert await store.release_jobs("w-1", T0, 3, "lost") == []
    assert await store.release_jobs(None, T0 + 10**6, 3, "lost") == []


async def test_renew_leases_extends_only_the_holders_jobs(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    await claim_one(store, "j-2", "w-2")
    await store.renew_leases("w-1", ["j-1", "j-2"], T0 + 500)
    j1 = await store.get_job(EP, "j-1")
    j2 = await store.get_job(EP, "j-2")
    assert j1 is not None
    assert j2 is not None
    assert j1.lease_until == T0 + 500
    assert j2.lease_until == T0 + 61
    assert await store.release_jobs(None, T0 + 100, 3, "lapsed") == [await store.get_job(EP, "j-2")]


async def test_stream_of_a_requeued_job_restarts_for_the_next_worker(
    store: Store,
) -> None:
    await claim_one(store, "j-1", "w-1")
    for i in range(2):
        await store.append_stream_chunks("j-1", "w-1", [(f'"old{i}"', None)])
    assert len(await store.read_new_stream_chunks("j-1")) == 2
    await store.release_jobs("w-1", T0 + 10, max_attempts=3, reason="lost")
    await store.claim_jobs(EP, "w-2", 1, now=T0 + 11, lease_until=T0 + 71)
    await store.append_stream_chunks("j-1", "w-2", [('"new0"', None)])
    assert await store.read_new_stream_chunks("j-1") == [StreamChunk(1, '"new0"', None)]


# -- workers and endpoints -------------------------------------------------------------------


async def test_workers_are_saved_replaced_listed_and_deleted(store: Store) -> None:
    w1 = make_worker("w-1")
    await store.save_worker(w1)
    await store.save_worker(make_worker("w-2", "ep-2"))
    assert await store.get_worker("w-1") == w1
    w1.state = WorkerState.RUNNING
    w1.idle_since = None
    w1.recycle = True
    await store.save_worker(w1)
    assert await store.get_worker("w-1") == w1
    assert [w.id for w in await store.list_workers(EP)] == ["w-1"]
    assert {w.id for w in await store.list_workers(None)} == {"w-1", "w-2"}
    await store.delete_worker("w-1")
    assert await store.get_worker("w-1") is None


async def test_a_load_balancing_worker_moves_only_between_its_serving_states(
    store: Store,
) -> None:
    starting = make_worker("w-1")
    starting.state, starting.idle_since = WorkerState.INITIALIZING, None
    starting.address, starting.health_address = "127.0.0.1:9000", "127.0.0.1:9001"
    await store.save_worker(starting)
    assert await store.get_worker("w-1") == starting

    # Requests in flight before its first ping passed change nothing: it is not serving yet.
    assert await store.worker_serving("w-1", busy=True, now=T0 + 1) is None
    ready = await store.worker_ready("w-1", now=T0 + 2)
    assert ready is not None
    assert (ready.state, ready.idle_since, ready.last_seen) == (WorkerState.IDLE, T0 + 2, T0 + 2)
    assert await store.worker_ready("w-1", now=T0 + 3) is None  # ready once
    busy = await store.worker_serving("w-1", busy=True, now=T0 + 4)
    assert busy is not None and (busy.state, busy.idle_since) == (WorkerState.RUNNING, None)
    idle = await store.worker_serving("w-1", busy=False, now=T0 + 5)
    assert idle is not None and (idle.state, idle.idle_since) == (WorkerState.IDLE, T0 + 5)

    await store.update_worker("w-1", {"state": WorkerState.STOPPING})
    assert await store.worker_serving("w-1", busy=False, now=T0 + 6) is None
    stored = await store.get_worker("w-1")
    assert stored is not None and stored.state is WorkerState.STOPPING


async def test_replicas_share_their_load_balancing_demand(store: Store) -> None:
    await store.set_lb_demand("r-a", "ep-1", in_flight=2, waiting=1, now=T0)
    await store.set_lb_demand("r-b", "ep-1", in_flight=3, waiting=0, now=T0 + 4)
    await store.set_lb_demand("r-b", "ep-2", in_flight=0, waiting=2, now=T0 + 4)

    # Each replica reads the others', summed per endpoint; old rows (a gone replica) not.
    assert await store.lb_demand_of_others("r-c", since=T0) == {"ep-1": (5, 1), "ep-2": (0, 2)}
    assert await store.lb_demand_of_others("r-a", since=T0) == {"ep-1": (3, 0), "ep-2": (0, 2)}
    assert await store.lb_demand_of_others("r-c", since=T0 + 1) == {"ep-1": (3, 0), "ep-2": (0, 2)}
    # Nothing held: the row goes; rows long unrefreshed are dropped by the next write.
    await store.set_lb_demand("r-b", "ep-2", in_flight=0, waiting=0, now=T0 + 5)
    assert await store.lb_demand_of_others("r-a", since=T0) == {"ep-1": (3, 0)}
    await store.set_lb_demand("r-b", "ep-1", in_flight=1, waiting=0, now=T0 + 10_000)
    assert await store.lb_demand_of_others("r-c", since=0) == {"ep-1": (1, 0)}


async def test_a_model_is_published_once_per_id_and_per_endpoint(store: Store) -> None:
    await store.create_endpoint(make_endpoint("ep-a"))
    await store.create_endpoint(make_endpoint("ep-b"))
    model = PublicModel("minilm", "ep-a", "embeddings", "u-1", T0)

    assert await store.publish_model(model)
    assert not await store.publish_model(PublicModel("minilm", "ep-b", "", "u-1", T0))
    assert not await store.publish_model(PublicModel("other", "ep-a", "", "u-1", T0))
    assert await store.public_model("minilm") == model
    assert await store.public_models() == [model]
    assert await store.unpublish_model("minilm")
    assert not await store.unpublish_model("minilm")
    # Deleting an endpoint withdraws its publication with it.
    assert await store.publish_model(PublicModel("b-model", "ep-b", "", "u-1", T0))
    await store.delete_endpoint("ep-b", 0.0)
    assert await store.public_models() == []


async def test_a_jobs_caller_is_kept(store: Store) -> None:
    await store.create_endpoint(make_endpoint())
    await insert_jobs(store, make_job("j-caller", caller_id="u-2"), make_job("j-owner"))

    called = await store.get_job(EP, "j-caller")
    owned = await store.get_job(EP, "j-owner")
    assert called is not None and called.caller_id == "u-2"
    assert owned is not None and owned.caller_id is None
    claimed = await store.claim_jobs(EP, "w-1", 2, now=T0, lease_until=T0 + 60)
    assert {j.id: j.caller_id for j in claimed} == {"j-caller": "u-2", "j-owner": None}


async def test_endpoint_update_bumps_version_only_when_asked(store: Store) -> None:
    endpoint = await store.create_endpoint(make_endpoint())
    assert await store.get_endpoint(EP) == endpoint
    spec = endpoint.spec.model_copy(update={"workersMax": 9})
    same = await store.update_endpoint(EP, spec, bump_version=False)
    assert same is not None
    assert (same.version, same.spec.workersMax) == (1, 9)
    rolled = await store.update_endpoint(
        EP, spec.model_copy(update={"templateId": "tpl-2"}), bump_version=True
    )
    assert rolled is not None
    assert rolled.version == 2
    assert await store.endpoints_using_template("tpl-2") == [EP]
    assert await store.endpoints_using_template("tpl-1") == []
    assert await store.update_endpoint("nope", spec, bump_version=True) is None


async def test_template_change_bumps_every_endpoint_using_it(store: Store) -> None:
    await store.create_endpoint(make_endpoint("ep-a", "tpl-1"))
    await store.create_endpoint(make_endpoint("ep-b", "tpl-1"))
    await store.create_endpoint(make_endpoint("ep-c", "tpl-2"))
    assert sorted(await store.bump_endpoint_versions("tpl-1")) == ["ep-a", "ep-b"]
    versions = {e.id: e.version for e in await store.list_endpoints(None)}
    assert versions == {"ep-a": 2, "ep-b": 2, "ep-c": 1}


async def test_list_endpoints_by_owner(store: Store) -> None:
    await store.create_endpoint(make_endpoint("ep-a"))
    theirs = make_endpoint("ep-b").model_copy(update={"userId": "u-2"})
    await store.create_endpoint(theirs)
    assert [e.id for e in await store.list_endpoints("u-1")] == ["ep-a"]
    assert [e.id for e in await store.list_endpoints("u-2")] == ["ep-b"]
    assert len(await store.list_endpoints(None)) == 2


async def test_what_a_user_holds_is_counted_per_kind_and_owner(store: Store) -> None:
    """The counts ``SKIFF_MAX_PER_USER`` is checked against (domain/quotas.py): every kind's
    query runs on both databases."""
    await store.create_endpoint(make_endpoint("ep-a"))
    await store.create_endpoint(make_endpoint("ep-b"))
    await store.create_endpoint(make_endpoint("ep-c").model_copy(update={"userId": "u-2"}))
    await store.create_template("u-1", make_template("t-1", "base"), T0)
    assert await store.count_owned(Owned.ENDPOINTS, "u-1") == 2
    assert await store.count_owned(Owned.ENDPOINTS, "u-2") == 1
    assert await store.count_owned(Owned.TEMPLATES, "u-1") == 1
    for kind in Owned:
        assert await store.count_owned(kind, "u-nobody") == 0, kind


async def test_delete_endpoint_removes_its_jobs_chunks_and_workers(store: Store) -> None:
    await store.create_endpoint(make_endpoint(EP))
    await store.create_endpoint(make_endpoint("ep-keep"))
    await store.save_worker(make_worker("w-1", EP))
    await store.save_worker(make_worker("w-keep", "ep-keep"))
    await claim_one(store, "j-run", "w-1")
    await store.append_stream_chunks("j-run", "w-1", [('"chunk"', None)])
    await store.insert_job(make_job("j-queued"))
    await store.insert_job(make_job("j-keep", "ep-keep"))

    assert await store.delete_endpoint(EP, 0.0) is True

    assert await store.get_endpoint(EP) is None
    assert await store.get_job(EP, "j-run") is None
    assert await store.get_job(EP, "j-queued") is None
    assert await store.job_counts(EP) == JobCounts()
    assert await store.get_worker("w-1") is None
    assert await store.jobs_of_worker("w-1") == []
    assert await store.read_new_stream_chunks("j-run") == []
    # A job later created with the same id starts a clean stream.
    await store.insert_job(make_job("j-run"))
    [job] = await store.claim_jobs(EP, "w-9", 1, now=T0, lease_until=T0 + 60)
    await store.append_stream_chunks("j-run", "w-9", [('"fresh"', None)])
    assert await store.read_new_stream_chunks("j-run") == [StreamChunk(1, '"fresh"', None)]
    assert job.attempt == 1
    # The other endpoint is untouched.
    assert await store.get_endpoint("ep-keep") is not None
    assert await store.get_job("ep-keep", "j-keep") is not None
    assert await store.get_worker("w-keep") is not None
    assert await store.delete_endpoint(EP, 0.0) is False


# -- users, keys, registry auths, templates --------------------------------------------------


async def test_user_names_are_unique(store: Store) -> None:
    user = await store.create_user(make_user())
    assert await store.get_user_by_name("alice") == user
    with pytest.raises(Conflict):
        await store.create_user(make_user("u-2", "alice"))
    assert await store.get_user_by_name("bob") is None


async def test_api_key_is_found_by_hash_and_revoked_once(store: Store) -> None:
    user = await store.create_user(make_user())
    key = ApiKey("k-1", user.id, "sk_abcd…wxyz", "laptop", T0, None)
    await store.add_api_key(key, "hash-1")
    assert await store.find_api_key("hash-1") == (key, user)
    assert await store.find_api_key("hash-unknown") is None
    assert await store.revoke_api_key("k-1", T0 + 5) is True
    assert await store.revoke_api_key("k-1", T0 + 9) is False
    found = await store.find_api_key("hash-1")
    assert found is not None
    assert found[0].revoked_at == T0 + 5
    assert [k.id for k, _u in await store.list_api_keys()] == ["k-1"]
    assert await store.revoke_api_key("k-unknown", T0) is False


async def test_api_key_keeps_its_permissions(store: Store) -> None:
    user = await store.create_user(make_user())
    restricted = Permissions(Kind.RESTRICTED, {"ep-a": Access.READ, "ep-b": Access.READ_WRITE})
    key = ApiKey("k-1", user.id, "h", "ci", T0, None, restricted)
    await store.add_api_key(key, "hash-1")
    await store.add_api_key(ApiKey("k-2", user.id, "h", "", T0 + 1, None, READ_ONLY), "hash-2")
    assert await store.find_api_key("hash-1") == (key, user)
    found = await store.find_api_key("hash-2")
    assert found is not None and found[0].permissions == READ_ONLY
    # A key made without saying does everything, as every key did before permissions.
    await store.add_api_key(ApiKey("k-3", user.id, "h", "", T0 + 2, None), "hash-3")
    found = await store.find_api_key("hash-3")
    assert found is not None and found[0].permissions == ALL


async def test_a_user_lists_and_revokes_only_their_own_keys(store: Store) -> None:
    alice = await store.create_user(make_user())
    bob = await store.create_user(make_user("u-2", "bob"))
    await store.add_api_key(ApiKey("k-a", alice.id, "h", "", T0, None), "hash-a")
    await store.add_api_key(ApiKey("k-b", bob.id, "h", "", T0, None), "hash-b")
    assert [k.id for k in await store.list_user_api_keys(alice.id)] == ["k-a"]
    assert await store.revoke_user_api_key(alice.id, "k-b", T0 + 1) is False
    found = await store.find_api_key("hash-b")
    assert found is not None and found[0].revoked_at is None
    assert await store.revoke_user_api_key(alice.id, "k-a", T0 + 1) is True
    assert await store.revoke_user_api_key(alice.id, "k-a", T0 + 2) is False
    assert [k.revoked_at for k in await store.list_user_api_keys(alice.id)] == [T0 + 1]


async def test_a_user_is_disabled_and_enabled_again(store: Store) -> None:
    alice = await store.create_user(make_user())
    await store.add_api_key(ApiKey("k-a", alice.id, "h", "", T0, None), "hash-a")
    bob = await store.create_user(make_user("u-2", "bob"))
    assert await store.disabled_user_ids() == set()
    assert await store.set_user_disabled(alice.id, T0 + 3) is True
    assert await store.disabled_user_ids() == {alice.id}
    disabled = await store.get_user(alice.id)
    assert disabled is not None and disabled.disabled_at == T0 + 3
    found = await store.find_api_key("hash-a")
    assert found is not None and found[1].disabled_at == T0 + 3
    assert [u.name for u in await store.list_users()] == ["alice", "bob"]
    assert await store.set_user_disabled(alice.id, None) is True
    assert await store.get_user(alice.id) == alice
    assert await store.disabled_user_ids() == set()
    assert await store.get_user(bob.id) == bob
    assert await store.set_user_disabled("u-unknown", T0) is False
    assert await store.get_user("u-unknown") is None


async def test_api_key_hash_is_unique(store: Store) -> None:
    user = await store.create_user(make_user())
    await store.add_api_key(ApiKey("k-1", user.id, "h", "", T0, None), "same-hash")
    with pytest.raises(Conflict):
        await store.add_api_key(ApiKey("k-2", user.id, "h", "", T0, None), "same-hash")


async def test_registry_auth_names_are_unique_per_user(store: Store) -> None:
    auth = RegistryAuthRecord("ra-1", "u-1", "dockerhub", "me", "pw", T0)
    await store.create_registry_auth(auth)
    with pytest.raises(Conflict):
        await store.create_registry_auth(
            RegistryAuthRecord("ra-2", "u-1", "dockerhub", "me2", "pw2", T0)
        )
    theirs = RegistryAuthRecord("ra-3", "u-2", "dockerhub", "them", "pw3", T0)
    await store.create_registry_auth(theirs)
    assert await store.list_registry_auths("u-1") == [auth]
    assert await store.get_registry_auth("u-1", "ra-1") == auth
    assert await store.get_registry_auth("u-2", "ra-1") is None
    assert await store.delete_registry_auth("u-2", "ra-1") is False
    assert await store.delete_registry_auth("u-1", "ra-1") is True
    assert await store.list_registry_auths("u-1") == []


async def test_template_names_are_unique_per_user(store: Store) -> None:
    tpl = await store.create_template("u-1", make_template("t-1", "base"), T0)
    with pytest.raises(Conflict):
        await store.create_template("u-1", make_template("t-2", "base"), T0)
    await store.create_template("u-2", make_template("t-3", "base"), T0)
    assert await store.list_templates("u-1") == [tpl]
    assert await store.get_template("u-2", "t-1") is None


async def test_template_rename_to_a_taken_name_is_a_conflict(store: Store) -> None:
    await store.create_template("u-1", make_template("t-1", "one"), T0)
    two = await store.create_template("u-1", make_template("t-2", "two"), T0 + 1)
    with pytest.raises(Conflict):
        await store.update_template("u-1", two.model_copy(update={"name": "one"}))
    assert await store.get_template("u-1", "t-2") == two
    renamed = two.model_copy(update={"name": "three", "imageName": "example/worker:2"})
    await store.update_template("u-1", renamed)
    assert await store.get_template("u-1", "t-2") == renamed
    assert await store.delete_template("u-1", "t-2") is True
    assert await store.delete_template("u-1", "t-2") is False


# -- secrets and durability ------------------------------------------------------------------


async def test_secret_is_stable_and_distinct_per_name(store: Store) -> None:
    first = await store.secret("worker-token")
    assert len(first) == 32
    assert await store.secret("worker-token") == first
    assert await store.secret("other") != first


async def test_concurrent_first_uses_of_a_secret_agree(store: Store) -> None:
    values = await asyncio.gather(*(store.secret("fresh") for _ in range(10)))
    assert len(set(values)) == 1


async def test_secret_survives_reopening_the_file(db_path: Path) -> None:
    first_store = SQLiteStore(db_path, KEYS)
    await first_store.open()
    try:
        secret = await first_store.secret("worker-token")
    finally:
        await first_store.close()
    second_store = SQLiteStore(db_path, KEYS)
    await second_store.open()
    try:
        assert await second_store.secret("worker-token") == secret
    finally:
        await second_store.close()


async def test_data_survives_close_and_reopen(db_path: Path) -> None:
    first_store = SQLiteStore(db_path, KEYS)
    await first_store.open()
    try:
        await first_store.create_user(make_user())
        await first_store.create_endpoint(make_endpoint())
        await insert_jobs(first_store, make_job("j-1"), make_job("j-2"))
        await first_store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
        await first_store.append_stream_chunks("j-1", "w-1", [('"c"', None)])
        await first_store.finish_job("j-1", "w-1", JobStatus.COMPLETED, '"out"', None, T0 + 1)
        before = await first_store.get_job(EP, "j-1")
    finally:
        await first_store.close()

    second_store = SQLiteStore(db_path, KEYS)
    await second_store.open()
    try:
        assert await second_store.get_user_by_name("alice") == make_user()
        assert await second_store.get_endpoint(EP) == make_endpoint()
        assert await second_store.get_job(EP, "j-1") == before
        assert await second_store.read_new_stream_chunks("j-1") == [StreamChunk(1, '"c"', None)]
        [queued] = await second_store.claim_jobs(EP, "w-2", 5, now=T0, lease_until=T0 + 60)
        assert queued.id == "j-2"
    finally:
        await second_store.close()


async def test_sqlite_counts_kept_in_place_start_from_the_deltas_left_unfolded(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database made before migration 0015 holds deltas not folded yet: they are counted."""
    before_0015 = [m for m in migrations(Dialect.SQLITE) if m[0] < "0015"]
    monkeypatch.setattr(sqlite_store, "migrations", lambda _dialect: before_0015)
    old = SQLiteStore(db_path, KEYS)
    await old.open()
    try:
        await old.create_endpoint(make_endpoint())
        # As that version inserted them (this version's insert names a later column).
        with sqlite3.connect(db_path) as conn:
            conn.executemany(
                "INSERT INTO jobs (id, endpoint_id, status, input, execution_timeout_ms, ttl_ms, "
                "submitted_at, expires_at) VALUES (?, ?, 'IN_QUEUE', '{}', 600000, 86400000, ?, ?)",
                [(job_id, EP, T0, T0 + 86_400) for job_id in ("j-1", "j-2", "j-3")],
            )
        conn.close()
        await old.claim_jobs(EP, "w-1", 2, now=T0, lease_until=T0 + 60)
        await old.finish_job("j-1", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 1)
        counted = await old.job_counts(EP)
    finally:
        await old.close()
    assert (counted.in_queue, counted.in_progress, counted.completed) == (1, 1, 1)
    monkeypatch.undo()
    store = SQLiteStore(db_path, KEYS)
    await store.open()
    try:
        assert await store.job_counts(EP) == counted
        await store.finish_job("j-2", "w-1", JobStatus.FAILED, None, "boom", T0 + 2)
        after = await store.job_counts(EP)
        assert (after.in_queue, after.in_progress, after.completed, after.failed) == (1, 0, 1, 1)
        assert await store.fold_job_counts() == 0
    finally:
        await store.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM job_count_deltas").fetchone() == (0,)
    conn.close()


async def test_open_applies_migrations_once(db_path: Path) -> None:
    for _ in range(2):
        s = SQLiteStore(db_path, KEYS)
        await s.open()
        await s.close()
    with sqlite3.connect(db_path) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM schema_migrations")]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert names == [
        "0001_init.sql",
        "0002_lifetimes_webhooks.sql",
        "0003_worker_gpus.sql",
        "0004_replicas.sql",
        "0005_job_counts.sql",
        "0006_lineups.sql",
        "0007_network_volumes.sql",
        "0008_pods.sql",
        "0009_usage.sql",
        "0010_user_settings.sql",
        "0011_load_balancing.sql",
        "0012_public_models.sql",
        "0013_key_permissions.sql",
        "0014_secrets.sql",
        "0015_job_counts_in_place.sql",
        "0016_stream_size.sql",
        "0017_job_bytes.sql",
        "0018_job_indexes.sql",
        "0019_replica_addresses.sql",
    ]
    assert {
        "jobs",
        "endpoints",
        "workers",
        "stream_chunks",
        "meta",
        "stop_signals",
        "webhook_deliveries",
        "network_volumes",
    } <= tables


# -- PostgreSQL: durability, migrations and concurrency --------------------------------------


async def test_pg_data_survives_close_and_reopen(pg_schema: str) -> None:
    first_store = PostgresStore(PG_DSN, schema=pg_schema, keys=KEYS)
    await first_store.open()
    try:
        secret = await first_store.secret("worker-token")
        await first_store.create_user(make_user())
        await first_store.create_endpoint(make_endpoint())
        await insert_jobs(first_store, make_job("j-1"), make_job("j-2"))
        await first_store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
        await first_store.append_stream_chunks("j-1", "w-1", [('"c"', None)])
        await first_store.finish_job("j-1", "w-1", JobStatus.COMPLETED, '"out"', None, T0 + 1)
        before = await first_store.get_job(EP, "j-1")
    finally:
        await first_store.close()

    second_store = PostgresStore(PG_DSN, schema=pg_schema, keys=KEYS)
    await second_store.open()
    try:
        assert await second_store.secret("worker-token") == secret
        assert await second_store.get_user_by_name("alice") == make_user()
        assert await second_store.get_endpoint(EP) == make_endpoint()
        assert await second_store.get_job(EP, "j-1") == before
        assert await second_store.read_new_stream_chunks("j-1") == [StreamChunk(1, '"c"', None)]
        [queued] = await second_store.claim_jobs(EP, "w-2", 5, now=T0, lease_until=T0 + 60)
        assert queued.id == "j-2"
    finally:
        await second_store.close()


def test_both_migration_sets_are_numbered_alike() -> None:
    numbers = {
        dialect: [name.split("_")[0] for name, _sql in migrations(dialect)]
        for dialect in (Dialect.SQLITE, Dialect.POSTGRES)
    }
    assert numbers[Dialect.SQLITE] == numbers[Dialect.POSTGRES]


#: What a database migrated by the version before the renumbering records.
EARLIER_RECORD = ["0001_init.sql", "0002_replicas.sql", "0003_job_counts.sql"]
#: Migrations written after the renumbering: never recorded under another name.
AFTER_RENUMBERING = [
    "0006_lineups.sql",
    "0007_network_volumes.sql",
    "0008_pods.sql",
    "0009_usage.sql",
    "0010_user_settings.sql",
    "0011_load_balancing.sql",
    "0012_public_models.sql",
    "0013_key_permissions.sql",
    "0014_secrets.sql",
    "0015_job_counts_in_place.sql",
    "0016_stream_size.sql",
    "0017_job_bytes.sql",
    "0018_job_indexes.sql",
    "0019_replica_addresses.sql",
]
#: What it records once this version has migrated it (or made it): both names of a renamed one.
BOTH_RECORDS = sorted(
    [
        "0001_init.sql",
        "0002_lifetimes_webhooks.sql",
        "0002_replicas.sql",
        "0003_job_counts.sql",
        "0003_worker_gpus.sql",
        "0004_replicas.sql",
        "0005_job_counts.sql",
        "0006_lineups.sql",
        "0007_network_volumes.sql",
        "0008_pods.sql",
        "0009_usage.sql",
        "0010_user_settings.sql",
        "0011_load_balancing.sql",
        "0012_public_models.sql",
        "0013_key_permissions.sql",
        "0014_secrets.sql",
        "0015_job_counts_in_place.sql",
        "0016_stream_size.sql",
        "0017_job_bytes.sql",
        "0018_job_indexes.sql",
        "0019_replica_addresses.sql",
    ]
)


async def _recorded(pg_schema: str) -> list[str]:
    conn = await asyncpg.connect(PG_DSN)
    try:
        rows = await conn.fetch(f'SELECT name FROM "{pg_schema}".schema_migrations')
    finally:
        await conn.close()
    return sorted(r[0] for r in rows)


async def test_pg_a_database_migrated_under_the_earlier_numbers_is_not_migrated_again(
    pg_schema: str,
) -> None:
    first = PostgresStore(PG_DSN, schema=pg_schema, keys=KEYS)
    await first.open()
    await first.create_endpoint(make_endpoint())
    await first.close()
    # As the version before the PostgreSQL set took the SQLite set's numbers records it (the
    # migrations numbered after the renumbering are left: that version had none of them).
    conn = await asyncpg.connect(PG_DSN)
    try:
        table = f'"{pg_schema}".schema_migrations'
        await conn.execute(
            f"DELETE FROM {table} WHERE NOT (name = ANY($1::text[])) AND name < $2",
            EARLIER_RECORD,
            AFTER_RENUMBERING[0],
        )
    finally:
        await conn.close()
    assert await _recorded(pg_schema) == EARLIER_RECORD + AFTER_RENUMBERING
    again = PostgresStore(PG_DSN, schema=pg_schema, keys=KEYS)
    await again.open()  # 0004 and 0005 run again would fail: their columns and tables exist
    try:
        assert await again.get_endpoint(EP) == make_endpoint()
    finally:
        await again.close()
    assert await _recorded(pg_schema) == BOTH_RECORDS


async def test_pg_a_database_made_now_keeps_the_earlier_names_for_a_replica_of_before(
    pg_schema: str,
) -> None:
    made = PostgresStore(PG_DSN, schema=pg_schema, keys=KEYS)
    await made.open()
    await made.close()
    recorded = await _recorded(pg_schema)
    assert recorded == BOTH_RECORDS
    # The version before applies what it does not find under its own names: none of them.
    assert set(EARLIER_RECORD) <= set(recorded)
    assert set(EARLIER_NAMES.values()) <= set(recorded)


async def test_pg_open_applies_migrations_once_even_when_replicas_start_together(
    pg_schema: str,
) -> None:
    stores = [PostgresStore(PG_DSN, schema=pg_schema, keys=KEYS) for _ in range(3)]
    await asyncio.gather(*(s.open() for s in stores))
    await asyncio.gather(*(s.close() for s in stores))
    again = PostgresStore(PG_DSN, schema=pg_schema, keys=KEYS)
    await again.open()
    await again.close()
    conn = await asyncpg.connect(PG_DSN)
    try:
        names = [
            r[0] for r in await conn.fetch(f'SELECT name FROM "{pg_schema}".schema_migrations')
        ]
        tables = {
            r[0]
            for r in await conn.fetch(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = $1",
                pg_schema,
            )
        }
    finally:
        await conn.close()
    assert sorted(names) == BOTH_RECORDS and len(names) == len(set(names))
    assert {
        "jobs",
        "endpoints",
        "workers",
        "stream_chunks",
        "meta",
        "stop_signals",
        "webhook_deliveries",
        "users",
        "api_keys",
        "registry_auths",
        "templates",
        "network_volumes",
    } <= tables


async def test_pg_concurrent_claimers_on_one_pool_get_every_job_exactly_once(
    pg_schema: str,
) -> None:
    s = PostgresStore(PG_DSN, schema=pg_schema, keys=KEYS)
    await s.open()
    try:
        await insert_jobs(s, *(make_job(f"j-{i:03}") for i in range(200)))

        async def claimer(n: int) -> list[str]:
            got: list[str] = []
            while batch := await s.claim_jobs(EP, f"w-{n}", 3, now=T0, lease_until=T0 + 60):
                got.extend(job.id for job in batch)
            return got

        results = await asyncio.gather(*(claimer(n) for n in range(10)))
        claimed = [job_id for got in results for job_id in got]
        assert len(claimed) == len(set(claimed))
        assert set(claimed) == {f"j-{i:03}" for i in range(200)}
        counts = await s.job_counts(EP)
        assert (counts.in_queue, counts.in_progress) == (0, 200)
        for n, got in enumerate(results):
            assert sorted(got) == await s.jobs_of_worker(f"w-{n}")
    finally:
        await s.close()


# -- listing, lifetimes and webhooks (both backends) -----------------------------------------


async def test_list_jobs_is_newest_first_and_continues_before_a_seq(store: Store) -> None:
    await insert_jobs(store, *(make_job(f"j-{i}") for i in range(5)))
    first = await store.list_jobs(EP, 2, None)
    assert [j.id for j in first] == ["j-4", "j-3"]
    rest = await store.list_jobs(EP, 10, first[-1].seq)
    assert [j.id for j in rest] == ["j-2", "j-1", "j-0"]


async def test_set_job_ttl_moves_the_expiry_from_submission(store: Store) -> None:
    await store.insert_job(make_job("j-1"))
    job = await store.set_job_ttl(EP, "j-1", 5_000)
    assert job is not None and (job.ttl_ms, job.expires_at) == (5_000, T0 + 5)
    assert await store.set_job_ttl("ep-other", "j-1", 5_000) is None


async def test_time_out_fails_running_jobs_past_their_deadline_and_signals_stop(
    store: Store,
) -> None:
    await store.insert_job(make_job("j-1", execution_timeout_ms=1_000))
    await store.claim_jobs(EP, "w-1", 1, now=T0 + 1, lease_until=T0 + 61)
    assert await store.time_out_jobs(T0 + 1.5) == []
    [job] = await store.time_out_jobs(T0 + 2)
    assert job.status is JobStatus.TIMED_OUT and job.finished_at == T0 + 2
    assert job.error == "execution timeout exceeded (policy.executionTimeout: 1000 ms)"
    assert await store.take_stop_signals("w-1", T0) == ["j-1"]
    assert await store.time_out_jobs(T0 + 3) == []


async def test_a_running_job_is_found_by_its_lease_or_its_deadline_whichever_comes_first(
    store: Store,
) -> None:
    """One index holds a running job by the sooner of the two (migration 0018): each of the
    two must still be found when it is the later one."""
    await store.insert_job(make_job("lease-first", execution_timeout_ms=100_000))
    await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 10)
    await store.insert_job(make_job("deadline-first", execution_timeout_ms=20_000))
    await store.claim_jobs(EP, "w-2", 1, now=T0, lease_until=T0 + 30)
    assert await store.time_out_jobs(T0 + 15) == []
    # One attempt allowed: it fails rather than queue again for the claim below.
    [lapsed] = await store.release_jobs(None, T0 + 15, 1, "lapsed")
    assert (lapsed.id, lapsed.status) == ("lease-first", JobStatus.FAILED)
    assert [j.id for j in await store.time_out_jobs(T0 + 25)] == ["deadline-first"]
    # Renewed past its deadline, a lease no longer hides the deadline.
    await store.insert_job(make_job("renewed", execution_timeout_ms=5_000))
    await store.claim_jobs(EP, "w-3", 1, now=T0 + 30, lease_until=T0 + 31)
    await store.renew_leases("w-3", ["renewed"], T0 + 90)
    assert await store.release_jobs(None, T0 + 34, 1, "lapsed") == []
    assert [j.id for j in await store.time_out_jobs(T0 + 35)] == ["renewed"]


async def test_expire_deletes_jobs_past_their_ttl_and_signals_running_ones(store: Store) -> None:
    await insert_jobs(store, make_job("j-run", ttl_ms=10_000), make_job("j-q", ttl_ms=10_000))
    await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
    assert await store.expire_jobs(T0 + 5, 10) == []
    gone = await store.expire_jobs(T0 + 10, 10)
    assert sorted(j.id for j in gone) == ["j-q", "j-run"]
    assert await store.get_job(EP, "j-run") is None
    assert await store.take_stop_signals("w-1", T0) == ["j-run"]


async def test_a_public_model_callers_webhook_is_signed_for_the_caller_not_the_owner(
    store: Store,
) -> None:
    """A job submitted through a public model carries its caller: its delivery is the caller's,
    so it is signed with the caller's secret. Signed with the owner's, any caller could have
    messages of its own choosing signed for the owner's receivers."""
    await store.create_user(make_user())
    await store.create_user(make_user("u-2", "bob"))
    await store.create_endpoint(make_endpoint())
    await store.insert_job(make_job("j-1", webhook="https://example.com/hook", caller_id="u-2"))
    await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, '"out"', None, T0 + 2)
    [delivery] = await store.due_webhook_deliveries(T0 + 2, 10)
    assert delivery.user_id == "u-2"
    assert await store.webhook_secret("u-2") != await store.webhook_secret("u-1")


async def test_due_webhook_deliveries_are_taken_in_turns_between_users(store: Store) -> None:
    """One user's backlog (receivers that never answer hold a sender's slot for its whole
    timeout) must not keep another's deliveries waiting: a pass takes each user's oldest, then
    each one's next, and so on."""
    await store.create_user(make_user())
    await store.create_user(make_user("u-2", "bob"))
    await store.create_endpoint(make_endpoint())
    hook = "https://example.com/hook"
    jobs = [make_job(f"a-{i}", webhook=hook) for i in range(5)]
    jobs += [make_job(f"b-{i}", webhook=hook, caller_id="u-2") for i in range(2)]
    await insert_jobs(store, *jobs)
    await store.claim_jobs(EP, "w-1", 7, now=T0, lease_until=T0 + 60)
    for at, job in enumerate(jobs, start=1):  # u-1's backlog is older than all of u-2's
        await store.finish_job(job.id, "w-1", JobStatus.COMPLETED, '"out"', None, T0 + at)
    due = await store.due_webhook_deliveries(T0 + 100, 4)
    assert [d.job_id for d in due] == ["a-0", "b-0", "a-1", "b-1"]


async def test_final_job_with_webhook_stores_a_delivery_sent_with_the_owners_secret(
    store: Store,
) -> None:
    await store.create_user(make_user())
    await store.create_endpoint(make_endpoint())
    await store.insert_job(make_job("j-1", webhook="https://example.com/hook"))
    await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, '"out"', None, T0 + 2)
    # Stored at once, due from the moment the job finished.
    assert await store.due_webhook_deliveries(T0 + 1, 10) == []
    [delivery] = await store.due_webhook_deliveries(T0 + 2, 10)
    assert (delivery.job_id, delivery.status, delivery.attempts) == ("j-1", "pending", 0)
    assert delivery.secret is None
    assert (delivery.url, delivery.user_id, delivery.next_attempt_at) == (
        "https://example.com/hook",
        "u-1",
        T0 + 2,
    )
    assert '"input":{"n":"j-1"}' in delivery.payload

    secret = await store.webhook_secret("u-1")
    assert await store.webhook_secret("u-1") == secret
    rotated = await store.webhook_secret("u-1", rotate=True)
    assert rotated != secret
    with pytest.raises(KeyError):
        await store.webhook_secret("u-missing")

    assert await store.due_webhook_deliveries(T0 + 1, 10) == []
    [due] = await store.due_webhook_deliveries(T0 + 2, 10)
    assert (due.id, due.secret) == (delivery.id, rotated)
    await store.record_webhook_attempt(due.id, "pending", "boom", T0 + 3, T0 + 10)
    assert await store.due_webhook_deliveries(T0 + 9, 10) == []
    [again] = await store.due_webhook_deliveries(T0 + 10, 10)
    assert (again.id, again.status, again.attempts, again.last_error) == (
        delivery.id,
        "pending",
        1,
        "boom",
    )
    await store.record_webhook_attempt(due.id, "delivered", None, T0 + 10, None)
    # Delivered: never due again (what a delivered row holds is pinned by the webhook tests).
    assert await store.due_webhook_deliveries(T0 + 100, 10) == []


# -- workers shared by several replicas ------------------------------------------------------


async def test_add_worker_keeps_a_record_that_is_already_there(store: Store) -> None:
    local = replace(make_worker("w-1"), owner="replica-a")
    await store.save_worker(local)
    stranger = replace(make_worker("w-1"), kind=WorkerKind.EXTERNAL, pid=None, owner=None)
    assert await store.add_worker(stranger) == local
    added = await store.add_worker(make_worker("w-2"))
    assert added == make_worker("w-2")


async def test_update_worker_sets_only_the_fields_given(store: Store) -> None:
    await store.save_worker(replace(make_worker("w-1"), owner="replica-a"))
    updated = await store.update_worker("w-1", {"state": WorkerState.STOPPING, "recycle": True})
    assert updated is not None
    assert updated.state is WorkerState.STOPPING and updated.recycle is True
    assert updated.pid == 1234 and updated.gpu == "GPU-0" and updated.owner == "replica-a"
    assert await store.update_worker("w-gone", {"pid": 1}) is None
    with pytest.raises(ValueError, match="not worker fields"):
        await store.update_worker("w-1", {"endpoint_id": "elsewhere"})


async def test_touch_worker_notes_the_call_and_a_starting_worker_becomes_idle(
    store: Store,
) -> None:
    await store.save_worker(replace(make_worker("w-1"), state=WorkerState.INITIALIZING))
    touched = await store.touch_worker("w-1", EP, T0 + 5)
    assert touched is not None
    assert touched.state is WorkerState.IDLE
    assert touched.last_seen == T0 + 5 and touched.idle_since == T0 + 5
    await store.update_worker("w-1", {"state": WorkerState.STOPPING})
    again = await store.touch_worker("w-1", EP, T0 + 6)
    assert again is not None and again.state is WorkerState.STOPPING
    assert await store.touch_worker("w-gone", EP, T0) is None


async def test_touch_worker_through_another_endpoint_leaves_the_worker_as_it_was(
    store: Store,
) -> None:
    """A caller of another endpoint naming this worker's id must not make it look ready."""
    await store.save_worker(replace(make_worker("w-1"), state=WorkerState.INITIALIZING))
    assert await store.touch_worker("w-1", "another-endpoint", T0 + 5) is None
    untouched = await store.get_worker("w-1")
    assert untouched is not None
    assert untouched.state is WorkerState.INITIALIZING and untouched.last_seen is None


async def test_claiming_makes_the_worker_running_and_letting_go_makes_it_idle(
    store: Store,
) -> None:
    await store.save_worker(make_worker("w-1"))
    await claim_one(store, "j-1", "w-1")
    running = await store.get_worker("w-1")
    assert running is not None
    assert running.state is WorkerState.RUNNING and running.idle_since is None
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 2)
    await store.let_go_of_jobs("w-1", ["j-1"], T0 + 2)
    idle = await store.get_worker("w-1")
    assert idle is not None
    assert idle.state is WorkerState.IDLE and idle.idle_since == T0 + 2


async def test_a_worker_still_holding_a_job_stays_running_after_letting_go_of_another(
    store: Store,
) -> None:
    await store.save_worker(make_worker("w-1"))
    for job_id in ("j-1", "j-2"):
        await store.insert_job(make_job(job_id))
    assert len(await store.claim_jobs(EP, "w-1", 2, now=T0, lease_until=T0 + 60)) == 2
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 2)
    await store.let_go_of_jobs("w-1", ["j-1"], T0 + 2)
    worker = await store.get_worker("w-1")
    assert worker is not None and worker.state is WorkerState.RUNNING


async def test_a_stopping_standby_or_recycled_worker_claims_nothing(store: Store) -> None:
    await store.insert_job(make_job("j-1"))
    await store.save_worker(replace(make_worker("w-stop"), state=WorkerState.STOPPING))
    await store.save_worker(replace(make_worker("w-ready"), state=WorkerState.STANDBY))
    await store.save_worker(replace(make_worker("w-old"), recycle=True))
    assert await store.claim_jobs(EP, "w-stop", 1, now=T0, lease_until=T0 + 60) == []
    assert await store.claim_jobs(EP, "w-ready", 1, now=T0, lease_until=T0 + 60) == []
    assert await store.claim_jobs(EP, "w-old", 1, now=T0, lease_until=T0 + 60) == []
    # A standby that calls in stays held back until it is promoted.
    touched = await store.touch_worker("w-ready", EP, T0 + 1)
    assert touched is not None and touched.state is WorkerState.STANDBY
    claimed = await store.claim_jobs(EP, "w-unrecorded", 1, now=T0, lease_until=T0 + 60)
    assert [j.id for j in claimed] == ["j-1"]


async def test_a_stop_signal_is_held_until_the_worker_lets_go(store: Store) -> None:
    await store.save_worker(make_worker("w-1"))
    await claim_one(store, "j-1", "w-1")
    await store.cancel_job(EP, "j-1", T0 + 3)
    assert await store.jobs_of_worker("w-1") == ["j-1"]
    assert await store.take_stop_signals("w-1", T0) == ["j-1"]
    assert await store.take_stop_signals("w-1", T0) == []
    # Told at T0 + 3 and still holding it: overdue for any grace that ended after that.
    assert await store.overdue_stop_workers(T0 + 2) == []
    assert await store.overdue_stop_workers(T0 + 3) == ["w-1"]
    await store.let_go_of_jobs("w-1", None, T0 + 4)
    assert await store.jobs_of_worker("w-1") == []
    assert await store.overdue_stop_workers(T0 + 100) == []


async def test_deleting_a_worker_forgets_its_stop_signals(store: Store) -> None:
    await claim_one(store, "j-1", "w-1")
    await store.cancel_job(EP, "j-1", T0 + 3)
    await store.delete_worker("w-1")
    assert await store.overdue_stop_workers(T0 + 100) == []
    assert await store.take_stop_signals("w-1", T0) == []


async def test_an_endpoints_worker_failure_is_recorded_and_cleared(store: Store) -> None:
    await store.create_endpoint(make_endpoint())
    assert await store.worker_failure(EP) is None
    await store.set_worker_failure(EP, '{"error": "boom"}')
    assert await store.worker_failure(EP) == '{"error": "boom"}'
    await store.set_worker_failure(EP, None)
    assert await store.worker_failure(EP) is None
    assert await store.worker_failure("ep-gone") is None


async def test_job_counts_are_the_same_before_and_after_folding_the_deltas(store: Store) -> None:
    await store.create_endpoint(make_endpoint())
    for job_id in ("j-1", "j-2", "j-3", "j-4"):
        await store.insert_job(make_job(job_id))
    await store.insert_job(make_job("j-low", low_priority=True))
    await store.claim_jobs(EP, "w-1", 2, now=T0, lease_until=T0 + 60)
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 1)
    await store.release_jobs("w-1", T0 + 2, 5, "lost")  # j-2 back to the queue, retried once
    await store.cancel_job(EP, "j-3", T0 + 3)
    before = await store.job_counts(EP)
    assert (before.in_queue, before.in_queue_normal, before.completed) == (3, 2, 1)
    assert (before.cancelled, before.retried) == (1, 1)
    folded = await store.fold_job_counts()
    # SQLite keeps its counts in place (migration 0015): nothing is left to fold there.
    assert folded == 0 if isinstance(store, SQLiteStore) else folded > 0
    assert await store.job_counts(EP) == before
    assert await store.fold_job_counts() == 0
    await store.purge_queue(EP)
    await store.fold_job_counts()
    after = await store.job_counts(EP)
    assert (after.in_queue, after.completed, after.cancelled) == (0, 1, 1)


async def test_pg_folding_while_jobs_change_loses_no_delta(pg_schema: str) -> None:
    # A delta committed between the fold's sum and its delete used to be deleted unsummed: on
    # PostgreSQL each statement of a READ COMMITTED transaction sees what committed before it.
    stores = [PostgresStore(PG_DSN, schema=pg_schema, max_size=4, keys=KEYS) for _ in range(2)]
    for s in stores:
        await s.open()
    writer, folder = stores
    try:
        await writer.create_endpoint(make_endpoint())
        jobs = [make_job(f"j-{i}") for i in range(240)]
        await insert_jobs(writer, *jobs)
        done = asyncio.Event()

        async def work(worker: str) -> None:
            while taken := await writer.claim_jobs(EP, worker, 2, now=T0, lease_until=T0 + 60):
                for job in taken:
                    await writer.finish_job(
                        job.id, worker, JobStatus.COMPLETED, '"ok"', None, T0 + 1
                    )

        async def fold() -> None:
            while not done.is_set():
                await folder.fold_job_counts()

        folding = asyncio.create_task(fold())
        await asyncio.gather(*(work(f"w-{n}") for n in range(4)))
        done.set()
        await folding
        await folder.fold_job_counts()
        counts = await folder.job_counts(EP)
        assert (counts.completed, counts.in_progress, counts.in_queue) == (240, 0, 0)
    finally:
        for s in stores:
            await s.close()


async def test_finishing_its_last_job_makes_the_worker_idle_in_the_same_step(
    store: Store,
) -> None:
    await store.save_worker(make_worker("w-1"))
    await claim_one(store, "j-1", "w-1")
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, '"ok"', None, T0 + 2)
    idle = await store.get_worker("w-1")
    assert idle is not None
    assert idle.state is WorkerState.IDLE and idle.idle_since == T0 + 2


# -- a worker's state under concurrent releases and claims (both backends) ----------------------

#: Enough workers, jobs and rounds that, on PostgreSQL, transactions of one worker do overlap.
_RACE_WORKERS = 8
_RACE_JOBS_PER_WORKER = 8
_RACE_ROUNDS = 5


async def test_concurrent_finishes_of_a_workers_last_jobs_leave_it_idle(store: Store) -> None:
    # Each worker's jobs finish at once from separate connections: under READ COMMITTED each
    # finish could see the others still running, so none would mark the worker idle.
    workers = [f"w-{n}" for n in range(_RACE_WORKERS)]
    for worker_id in workers:
        await store.save_worker(make_worker(worker_id))
    for round_no in range(_RACE_ROUNDS):
        held: dict[str, list[str]] = {}
        for worker_id in workers:
            ids = [f"j-{round_no}-{worker_id}-{i}" for i in range(_RACE_JOBS_PER_WORKER)]
            await insert_jobs(store, *(make_job(job_id) for job_id in ids))
            claimed = await store.claim_jobs(
                EP, worker_id, _RACE_JOBS_PER_WORKER, now=T0, lease_until=T0 + 60
            )
            held[worker_id] = [job.id for job in claimed]
            assert sorted(held[worker_id]) == sorted(ids)
        finished = await asyncio.gather(
            *(
                store.finish_job(job_id, worker_id, JobStatus.COMPLETED, '"ok"', None, T0 + 1)
                for worker_id, ids in held.items()
                for job_id in ids
            )
        )
        assert all(job is not None for job in finished)
        for worker_id in workers:
            worker = await store.get_worker(worker_id)
            assert worker is not None
            assert await store.jobs_of_worker(worker_id) == []
            assert worker.state is WorkerState.IDLE, f"round {round_no}: {worker_id} stays busy"


async def test_a_finish_racing_the_reaper_leaves_a_worker_idle(store: Store) -> None:
    # Each worker holds one job it is finishing and one whose lease lapsed. The reaper puts the
    # lapsed ones back in the queue and then idles the running workers that hold nothing, while
    # the finishes commit: whichever order, no worker may stay running with no job.
    workers = [f"w-{n}" for n in range(_RACE_WORKERS)]
    for worker_id in workers:
        await store.save_worker(make_worker(worker_id))
    for round_no in range(_RACE_ROUNDS * 10):
        finishing: dict[str, str] = {}
        for worker_id in workers:
            for suffix, lease in (("a", T0 + 60), ("b", T0 + 1)):
                job_id = f"j-{round_no}-{worker_id}-{suffix}"
                await store.insert_job(make_job(job_id))
                claimed = await store.claim_jobs(EP, worker_id, 1, now=T0, lease_until=lease)
                assert [job.id for job in claimed] == [job_id]
            finishing[worker_id] = f"j-{round_no}-{worker_id}-a"

        async def finish(worker_id: str, job_id: str) -> None:
            job = await store.finish_job(
                job_id, worker_id, JobStatus.COMPLETED, '"ok"', None, T0 + 2
            )
            assert job is not None

        async def reap() -> None:
            # As ``Dispatch.release_expired_leases`` does: requeue, then idle the running.
            await store.release_jobs(None, T0 + 2, 5, "lease expired")
            await asyncio.gather(*(store.let_go_of_jobs(w, [], T0 + 2) for w in workers))

        await asyncio.gather(reap(), *(finish(w, j) for w, j in finishing.items()))
        for worker_id in workers:
            worker = await store.get_worker(worker_id)
            assert worker is not None
            assert await store.jobs_of_worker(worker_id) == []
            assert worker.state is WorkerState.IDLE, f"round {round_no}: {worker_id} stays busy"
        await store.purge_queue(EP)


async def test_a_claim_racing_a_release_never_leaves_a_worker_idle_with_a_job(
    store: Store,
) -> None:
    # Each worker finishes its one job while it claims the next: whichever commits first, a
    # worker that ends up holding a job must be running (the claim wins over the idling).
    workers = [f"w-{n}" for n in range(_RACE_WORKERS)]
    for worker_id in workers:
        await store.save_worker(make_worker(worker_id))
    for round_no in range(_RACE_ROUNDS * 4):
        first = {w: f"j-{round_no}-{w}-a" for w in workers}
        for worker_id, job_id in first.items():
            await store.insert_job(make_job(job_id))
            claimed = await store.claim_jobs(EP, worker_id, 1, now=T0, lease_until=T0 + 60)
            assert [job.id for job in claimed] == [job_id]
        await insert_jobs(store, *(make_job(f"j-{round_no}-{w}-b") for w in workers))

        async def finish(worker_id: str, job_id: str) -> None:
            await store.finish_job(job_id, worker_id, JobStatus.COMPLETED, '"ok"', None, T0 + 1)

        async def claim(worker_id: str) -> None:
            await store.claim_jobs(EP, worker_id, 1, now=T0 + 1, lease_until=T0 + 61)

        await asyncio.gather(
            *(finish(w, j) for w, j in first.items()), *(claim(w) for w in workers)
        )
        for worker_id in workers:
            worker = await store.get_worker(worker_id)
            assert worker is not None
            holds = await store.jobs_of_worker(worker_id)
            expected = WorkerState.RUNNING if holds else WorkerState.IDLE
            assert worker.state is expected, f"round {round_no}: {worker_id} holds {holds}"
        # Let go of what was claimed, so the next round starts from idle workers.
        for worker_id in workers:
            for job_id in await store.jobs_of_worker(worker_id):
                await store.finish_job(job_id, worker_id, JobStatus.COMPLETED, '"ok"', None, T0)
