"""What both databases' query-plan tests hold every named query to (``tests/integration/store/
test_sqlite_query_plans.py``, ``test_postgres_query_plans.py``)."""

from __future__ import annotations

#: Tables with a row per job (or more).
GROWS_WITH_JOBS = ("jobs", "stream_chunks", "webhook_deliveries")

#: Queries that read every row by design, and why.
WHOLE_BY_DESIGN = {
    # A new sealing key re-seals every job's S3 settings (store/sealing.py).
    "sealed_s3_configs",
}

#: The busy queries, each with an index it must read.
BUSY_QUERIES = [
    # Each take of a worker that says it holds nothing.
    ("jobs_of_worker", "jobs_held"),
    ("jobs_of_worker", "jobs_lined_up"),
    # Before each claim that is more than one statement.
    ("claimable_job", "jobs_queue"),
    ("purge_queue", "jobs_queue"),
    # The reaper, every pass: both kinds of due job from one index.
    ("time_out_jobs", "jobs_due"),
    ("fail_jobs_of_lapsed_leases", "jobs_due"),
    ("requeue_jobs_of_lapsed_leases", "jobs_due"),
    ("running_calls_of_lapsed_leases", "jobs_due"),
]
