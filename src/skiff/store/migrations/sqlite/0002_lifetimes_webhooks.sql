-- Job lifetimes (ttl, retention, execution deadline), stop signals in their own table so a
-- stop outlives the job row it concerns, and stored webhook deliveries.
ALTER TABLE jobs ADD COLUMN expires_at REAL;
UPDATE jobs SET expires_at = submitted_at + ttl_ms / 1000.0;
ALTER TABLE jobs ADD COLUMN retention_ms INTEGER NOT NULL DEFAULT 1800000;
ALTER TABLE jobs ADD COLUMN retain_until REAL;
ALTER TABLE jobs ADD COLUMN run_deadline REAL;
CREATE INDEX jobs_expiry ON jobs (expires_at);
CREATE INDEX jobs_retention ON jobs (retain_until) WHERE retain_until IS NOT NULL;
CREATE INDEX jobs_deadline ON jobs (run_deadline) WHERE status = 'IN_PROGRESS';
CREATE INDEX jobs_recent ON jobs (endpoint_id, seq);

CREATE TABLE stop_signals (
    worker_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY (worker_id, job_id)
) WITHOUT ROWID;
INSERT INTO stop_signals (worker_id, job_id, reason)
    SELECT worker_id, id, 'cancelled' FROM jobs WHERE stop_pending = 1 AND worker_id IS NOT NULL;
DROP INDEX jobs_held;
CREATE INDEX jobs_held ON jobs (worker_id) WHERE status = 'IN_PROGRESS';
ALTER TABLE jobs DROP COLUMN stop_pending;

ALTER TABLE users ADD COLUMN webhook_secret TEXT;

CREATE TABLE webhook_deliveries (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    url TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',  -- pending, delivered, failed
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    last_error TEXT,
    created_at REAL NOT NULL,
    finished_at REAL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_job ON webhook_deliveries (job_id);
