"""Contract tests of what each user's jobs hold (``Store.job_bytes_of``): every test runs on
SQLite (a real database file) and on PostgreSQL (a fresh schema; skipped when no server is
reachable).

A job's input, webhook and S3 settings count against who submitted it (a public model's
caller, else the endpoint's owner), its result, error and stream against the endpoint's owner,
and a pending webhook delivery's payload against its user, in UTF-8 bytes, from the insert until
the row is removed (or the delivery ends), whatever removes it; folding the deltas changes no
figure."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from integration.store import test_store_contract as contract
from integration.store.test_store_contract import (
    EP,
    KEYS,
    T0,
    make_endpoint,
    make_job,
    make_user,
)
from skiff.domain.jobs import JobStatus
from skiff.domain.results import stream_size
from skiff.store import sqlite as sqlite_store
from skiff.store.base import Store
from skiff.store.migration_scripts import migrations
from skiff.store.named_queries import Dialect
from skiff.store.sqlite import SQLiteStore

db_path = contract.db_path
store = contract.store

OWNER = "u-1"  # make_endpoint's owner


def size(*parts: str) -> int:
    return sum(len(p.encode()) for p in parts)


async def test_a_queued_job_counts_its_input_webhook_and_s3_settings_against_its_owner(
    store: Store,
) -> None:
    await store.create_endpoint(make_endpoint())
    assert await store.job_bytes_of(OWNER) == 0
    job = make_job("j-1", webhook="https://example.com/hook")
    await store.insert_job(job)
    assert await store.job_bytes_of(OWNER) == size(job.input_json, "https://example.com/hook")
    # The S3 settings are kept sealed: they count as stored, a little longer than given.
    await store.insert_job(make_job("j-2", s3_config_json='{"bucketName":"b"}'))
    with_s3 = await store.job_bytes_of(OWNER)
    assert with_s3 > size(job.input_json, "https://example.com/hook", make_job("j-2").input_json)
    assert await store.job_bytes_of("someone-else") == 0


async def test_bytes_are_utf8_bytes_not_characters(store: Store) -> None:
    await store.create_endpoint(make_endpoint())
    text = '{"t":"' + "\u00e9\u4e2d\U0001f600" * 100 + '"}'
    await store.insert_job(make_job("j-1", input_json=text))
    assert await store.job_bytes_of(OWNER) == len(text.encode()) == 8 + 100 * (2 + 3 + 4)


async def test_a_public_model_callers_input_counts_against_the_caller_its_result_the_owner(
    store: Store,
) -> None:
    await store.create_endpoint(make_endpoint())
    job = make_job("j-1", caller_id="caller-1")
    await store.insert_job(job)
    assert await store.job_bytes_of("caller-1") == size(job.input_json)
    assert await store.job_bytes_of(OWNER) == 0
    await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
    # The owner's worker wrote the result: the owner's, so no owner can fill a caller's share.
    result = '"' + "r" * 5000 + '"'
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, result, None, T0 + 1)
    assert await store.job_bytes_of("caller-1") == size(job.input_json)
    assert await store.job_bytes_of(OWNER) == size(result)
    await store.expire_jobs(T0 + 10**9, 100)
    assert (await store.job_bytes_of("caller-1"), await store.job_bytes_of(OWNER)) == (0, 0)


async def test_a_job_inserted_after_its_endpoint_was_deleted_still_counts(store: Store) -> None:
    # The owner is given by the submission, not read from an endpoint that may be gone.
    job = make_job("j-1", "ep-gone")
    await store.insert_job(job, owner_id="u-9")
    assert await store.job_bytes_of("u-9") == size(job.input_json)


async def test_a_result_an_error_and_a_stream_count_until_a_retry_clears_them(
    store: Store,
) -> None:
    await store.create_endpoint(make_endpoint())
    job = make_job("j-1")
    await store.insert_job(job)
    queued = size(job.input_json)
    await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
    assert await store.job_bytes_of(OWNER) == queued
    await store.record_progress("j-1", "w-1", '"half way"')
    assert await store.job_bytes_of(OWNER) == queued + size('"half way"')
    chunks: list[tuple[str, str | None]] = [('"chunk-1"', None), ('"chunk-2"', '{"ms":1}')]
    await store.append_stream_chunks("j-1", "w-1", chunks)
    streamed = stream_size(chunks)
    assert await store.job_bytes_of(OWNER) == queued + size('"half way"') + streamed
    failed = await store.finish_job("j-1", "w-1", JobStatus.FAILED, None, "boom " * 50, T0 + 1)
    assert failed is not None
    assert await store.job_bytes_of(OWNER) == queued + size("boom " * 50) + streamed
    retried = await store.retry_job(EP, "j-1")
    assert retried is not None and retried.status is JobStatus.IN_QUEUE
    assert await store.job_bytes_of(OWNER) == queued


async def test_a_completed_jobs_result_counts_until_its_retention_removes_it(
    store: Store,
) -> None:
    await store.create_endpoint(make_endpoint())
    job = replace(make_job("j-1"), retention_ms=60_000)
    await store.insert_job(job)
    await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
    result = '{"text":"' + "x" * 10_000 + '"}'
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, result, None, T0 + 1)
    assert await store.job_bytes_of(OWNER) == size(job.input_json, result)
    assert await store.expire_jobs(T0 + 30, 100) == []
    assert await store.job_bytes_of(OWNER) == size(job.input_json, result)
    assert [j.id for j in await store.expire_jobs(T0 + 62, 100)] == ["j-1"]
    assert await store.job_bytes_of(OWNER) == 0


async def test_purging_the_queue_or_deleting_the_endpoint_gives_the_bytes_back(
    store: Store,
) -> None:
    await store.create_endpoint(make_endpoint())
    await store.create_endpoint(make_endpoint("ep-2"))
    for i in range(3):
        await store.insert_job(make_job(f"a-{i}", input_json='"' + "a" * 1000 + '"'))
        await store.insert_job(make_job(f"b-{i}", "ep-2", input_json='"' + "b" * 500 + '"'))
    assert await store.job_bytes_of(OWNER) == 3 * 1002 + 3 * 502
    assert await store.purge_queue(EP) == 3
    assert await store.job_bytes_of(OWNER) == 3 * 502
    assert await store.delete_endpoint("ep-2", T0 + 1)
    assert await store.job_bytes_of(OWNER) == 0


async def test_folding_the_deltas_changes_no_figure(store: Store) -> None:
    await store.create_endpoint(make_endpoint())
    for i in range(4):
        await store.insert_job(make_job(f"j-{i}", input_json='"' + "x" * (100 * i) + '"'))
    await store.insert_job(make_job("c-1", caller_id="caller-1"))
    await store.claim_jobs(EP, "w-1", 2, now=T0, lease_until=T0 + 60)
    await store.finish_job("j-0", "w-1", JobStatus.COMPLETED, '"' + "r" * 300 + '"', None, T0)
    before = (await store.job_bytes_of(OWNER), await store.job_bytes_of("caller-1"))
    assert before[0] > 0 and before[1] > 0
    folded = await store.fold_job_counts()
    # SQLite keeps its figures in place: nothing is left to fold there.
    assert folded == 0 if isinstance(store, SQLiteStore) else folded > 0
    assert (await store.job_bytes_of(OWNER), await store.job_bytes_of("caller-1")) == before
    await store.purge_queue(EP)
    await store.expire_jobs(T0 + 10**9, 100)
    await store.fold_job_counts()
    assert (await store.job_bytes_of(OWNER), await store.job_bytes_of("caller-1")) == (0, 0)


async def test_a_pending_webhook_delivery_counts_until_it_ends_and_is_pruned_a_day_later(
    store: Store,
) -> None:
    await store.create_user(make_user())
    await store.create_endpoint(make_endpoint())
    job = make_job("j-1", webhook="https://example.com/hook")
    await store.insert_job(job)
    await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
    result = '"' + "r" * 3000 + '"'
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, result, None, T0 + 1)
    [delivery] = await store.due_webhook_deliveries(T0 + 1, 10)
    held = size(job.input_json, "https://example.com/hook", result)
    # The delivery's payload copies the input and the result, and counts while it is pending.
    assert await store.job_bytes_of(OWNER) == held + size(delivery.payload)
    await store.record_webhook_attempt(delivery.id, "pending", "HTTP 500", T0 + 2, T0 + 10)
    assert await store.job_bytes_of(OWNER) == held + size(delivery.payload)
    await store.record_webhook_attempt(delivery.id, "delivered", None, T0 + 11, None)
    assert await store.job_bytes_of(OWNER) == held
    assert await store.prune_webhook_deliveries(T0 + 11, 100) == 0  # ended at T0 + 11
    assert await store.prune_webhook_deliveries(T0 + 12, 100) == 1
    await store.expire_jobs(T0 + 10**9, 100)
    await store.fold_job_counts()
    assert await store.job_bytes_of(OWNER) == 0


async def test_a_failed_delivery_lets_go_of_its_payload_too(store: Store) -> None:
    await store.create_user(make_user())
    await store.create_endpoint(make_endpoint())
    await store.insert_job(make_job("j-1", webhook="https://example.com/hook"))
    await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
    await store.finish_job("j-1", "w-1", JobStatus.FAILED, None, "boom", T0 + 1)
    before = await store.job_bytes_of(OWNER)
    [delivery] = await store.due_webhook_deliveries(T0 + 1, 10)
    await store.record_webhook_attempt(delivery.id, "failed", "HTTP 500", T0 + 2, None)
    assert await store.job_bytes_of(OWNER) == before - size(delivery.payload)


async def test_a_callers_delivery_counts_its_result_against_the_owner_not_the_caller(
    store: Store,
) -> None:
    """A model's owner cannot fill a caller's share with large results sent to the caller's
    webhook: the owner's worker wrote them."""
    await store.create_user(make_user())
    await store.create_user(make_user("caller-1", "bob"))
    await store.create_endpoint(make_endpoint())
    job = make_job("j-1", webhook="https://example.com/hook", caller_id="caller-1")
    await store.insert_job(job)
    await store.claim_jobs(EP, "w-1", 1, now=T0, lease_until=T0 + 60)
    result = '"' + "\u00e9" * 4000 + '"'
    await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, result, None, T0 + 1)
    [delivery] = await store.due_webhook_deliveries(T0 + 1, 10)
    given = size(job.input_json, "https://example.com/hook")
    assert await store.job_bytes_of("caller-1") == given + size(delivery.payload) - size(result)
    assert await store.job_bytes_of(OWNER) == 2 * size(result)
    await store.record_webhook_attempt(delivery.id, "delivered", None, T0 + 2, None)
    assert await store.job_bytes_of("caller-1") == given
    assert await store.job_bytes_of(OWNER) == size(result)


async def test_sqlite_jobs_from_before_the_migration_count_against_no_one(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Filling in their submitters would rewrite every row on the disk this guards: they
    count against no one, and their removal takes nothing from anyone. The webhook deliveries
    kept count against their users, read once, as their removal will take from them."""
    before_0017 = [m for m in migrations(Dialect.SQLITE) if m[0] < "0017"]
    monkeypatch.setattr(sqlite_store, "migrations", lambda _dialect: before_0017)
    old = SQLiteStore(db_path, KEYS)
    await old.open()
    try:
        await old.create_endpoint(make_endpoint())
    finally:
        await old.close()
    # The jobs as that version wrote them.
    with sqlite3.connect(db_path) as conn:
        conn.executemany(
            "INSERT INTO jobs (id, endpoint_id, status, input, execution_timeout_ms, ttl_ms, "
            "submitted_at, expires_at, output, caller_id) "
            "VALUES (?, ?, ?, ?, 1000, 1000, ?, ?, ?, ?)",
            [
                ("old", EP, "IN_PROGRESS", '"' + "o" * 700 + '"', T0, T0 + 1, None, None),
                ("called", EP, "IN_QUEUE", '{"n":"called"}', T0, T0 + 1, None, "caller-1"),
            ],
        )
        # Deliveries that version kept, one pending and one ended with its payload kept.
        conn.executemany(
            "INSERT INTO webhook_deliveries (id, job_id, endpoint_id, user_id, url, payload, "
            "status, next_attempt_at, created_at, finished_at) "
            "VALUES (?, 'j-0', ?, ?, 'https://example.com/hook', ?, ?, ?, ?, ?)",
            [
                ("d-pending", EP, OWNER, "p" * 300, "pending", T0, T0, None),
                ("d-ended", EP, OWNER, "e" * 200, "delivered", T0, T0, T0 + 1),
            ],
        )
    conn.close()
    monkeypatch.undo()
    store = SQLiteStore(db_path, KEYS)
    await store.open()
    try:
        # The deliveries it kept count from here, so that removing them takes back no more.
        assert await store.job_bytes_of(OWNER) == 500
        new = make_job("new")
        await store.insert_job(new)
        assert await store.job_bytes_of(OWNER) == 500 + size(new.input_json)
        assert await store.job_bytes_of("caller-1") == 0
        await store.finish_job("old", None, JobStatus.COMPLETED, '"done"', None, T0 + 1)
        assert await store.job_bytes_of(OWNER) == 500 + size(new.input_json)
        await store.expire_jobs(T0 + 10**9, 100)
        assert await store.job_bytes_of(OWNER) == 500
        await store.record_webhook_attempt("d-pending", "failed", "HTTP 500", T0 + 2, None)
        assert await store.job_bytes_of(OWNER) == 200
        assert await store.prune_webhook_deliveries(T0 + 10, 100) == 2
        assert (await store.job_bytes_of(OWNER), await store.job_bytes_of("caller-1")) == (0, 0)
    finally:
        await store.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM job_bytes").fetchone() == (0,)
    conn.close()
