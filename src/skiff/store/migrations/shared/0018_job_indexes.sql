-- Fewer indexes for a job's status changes to rewrite. A job changes status three times on its
-- way (queued, running, final), and each change rewrote every index that holds the status or
-- is restricted by it: on SQLite each such index is one more page a commit writes to the WAL
-- (about a fifth of the pages a job's three commits write went to the three dropped here).
--
-- * ``jobs_endpoint_status`` served only reads that other indexes serve as well: an
--   endpoint's queue (``jobs_queue``), and its running jobs when the endpoint is deleted
--   (``jobs_recent``, which that delete walks anyway). Job counts are kept by trigger (0005,
--   0015).
-- * ``jobs_lease`` and ``jobs_deadline`` held every running job twice. A running job is due
--   when its lease lapses or its execution deadline passes, whichever comes first: one index
--   on that moment finds both, and the queries that look for either (jobs.sql) name the same
--   expression so that the planners use it. A deadline not set counts as none (lease only).
DROP INDEX jobs_endpoint_status;
DROP INDEX jobs_lease;
DROP INDEX jobs_deadline;
CREATE INDEX jobs_due ON jobs ((
    CASE WHEN run_deadline IS NULL OR lease_until < run_deadline THEN lease_until
    ELSE run_deadline END
)) WHERE status = 'IN_PROGRESS';
