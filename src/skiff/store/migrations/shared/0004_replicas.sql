-- Several replicas on one database. On SQLite there is only ever one replica, but the model is
-- the same on both databases.

-- The replica that started a local worker owns its process; only it can stop it.
ALTER TABLE workers ADD COLUMN owner TEXT;

-- A stop signal stays until the worker lets go of the job (its result, or a job-take that says
-- it holds nothing), so any replica can tell a worker that ignores it.
ALTER TABLE stop_signals ADD COLUMN created_at DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE stop_signals ADD COLUMN delivered BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX stop_signals_created ON stop_signals (created_at);

-- The latest failed worker start of an endpoint (JSON), shown in its status by every replica.
ALTER TABLE endpoints ADD COLUMN worker_failure TEXT;

-- The replicas serving this database: where to reach each (worker logs live with the replica
-- that ran the worker) and which database session proves it alive.
CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    hostname TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    session TEXT
);
