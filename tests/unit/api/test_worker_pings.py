"""What a worker's ping names (``api/workers.py``): the ids its leases are renewed for."""

from __future__ import annotations

from skiff.api.workers import MAX_PING_JOBS, named_jobs


def test_each_job_is_named_once_in_the_order_given() -> None:
    assert named_jobs("b,a,,b,a,c") == ["b", "a", "c"]
    assert named_jobs("") == []


def test_a_name_holding_a_nul_is_no_job() -> None:
    assert named_jobs("a,b\x00c,d") == ["a", "d"]


def test_no_more_ids_are_renewed_than_a_worker_could_hold() -> None:
    """Renewals are a write every tenant's writes queue behind: a ping of tens of thousands of
    ids renews the first ``MAX_PING_JOBS``."""
    named = named_jobs(",".join(f"j{i}" for i in range(3 * MAX_PING_JOBS)))
    assert named == [f"j{i}" for i in range(MAX_PING_JOBS)]
