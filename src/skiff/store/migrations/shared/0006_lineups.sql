-- Jobs lined up on a worker behind the one it runs (services/lineup.py), in the order the
-- worker runs them. The jobs themselves stay IN_QUEUE with the worker recorded; a row here
-- outlives a job cancelled or purged before its turn, so that the worker is told to stop it
-- when the turn comes.
CREATE TABLE lineups (
    worker_id TEXT NOT NULL,
    pos INTEGER NOT NULL,
    job_id TEXT NOT NULL,
    PRIMARY KEY (worker_id, pos)
);
-- A worker's lined-up jobs, found when it finishes one, is lost, or renews its leases.
CREATE INDEX jobs_lined_up ON jobs (worker_id) WHERE status = 'IN_QUEUE' AND worker_id IS NOT NULL;
