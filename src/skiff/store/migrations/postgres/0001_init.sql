-- skiff schema, version 1 (PostgreSQL): the same model as the SQLite migrations 0001..0003
-- together. Times are seconds since the epoch (DOUBLE PRECISION); JSON stays text.
CREATE TABLE meta (
    name TEXT PRIMARY KEY,
    value BYTEA NOT NULL
);

CREATE TABLE users (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    is_admin BOOLEAN NOT NULL DEFAULT FALSE,
    created_at DOUBLE PRECISION NOT NULL,
    webhook_secret TEXT
);

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    key_hash TEXT NOT NULL UNIQUE,
    hint TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    revoked_at DOUBLE PRECISION
);

CREATE TABLE registry_auths (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    username TEXT NOT NULL,
    password TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    UNIQUE (user_id, name)
);

CREATE TABLE templates (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    UNIQUE (user_id, name)
);

CREATE TABLE endpoints (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    template_id TEXT NOT NULL,
    spec TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX endpoints_user ON endpoints (user_id);
CREATE INDEX endpoints_template ON endpoints (template_id);

CREATE TABLE jobs (
    seq BIGSERIAL PRIMARY KEY,  -- submission order
    id TEXT NOT NULL UNIQUE,
    endpoint_id TEXT NOT NULL,
    status TEXT NOT NULL,
    input TEXT NOT NULL,
    execution_timeout_ms BIGINT NOT NULL,
    ttl_ms BIGINT NOT NULL,
    low_priority BOOLEAN NOT NULL DEFAULT FALSE,
    webhook TEXT,
    s3_config TEXT,
    submitted_at DOUBLE PRECISION NOT NULL,
    started_at DOUBLE PRECISION,
    finished_at DOUBLE PRECISION,
    output TEXT,
    error TEXT,
    worker_id TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    retries INTEGER NOT NULL DEFAULT 0,
    lease_until DOUBLE PRECISION,
    stream_cursor BIGINT NOT NULL DEFAULT 0,
    expires_at DOUBLE PRECISION,
    retention_ms BIGINT NOT NULL DEFAULT 1800000,
    retain_until DOUBLE PRECISION,
    run_deadline DOUBLE PRECISION
);
-- The claim walks this: queued jobs of one endpoint, normal priority first, oldest first.
CREATE INDEX jobs_queue ON jobs (endpoint_id, low_priority, seq) WHERE status = 'IN_QUEUE';
CREATE INDEX jobs_endpoint_status ON jobs (endpoint_id, status);
CREATE INDEX jobs_held ON jobs (worker_id) WHERE status = 'IN_PROGRESS';
CREATE INDEX jobs_lease ON jobs (lease_until) WHERE status = 'IN_PROGRESS';
CREATE INDEX jobs_expiry ON jobs (expires_at);
CREATE INDEX jobs_retention ON jobs (retain_until) WHERE retain_until IS NOT NULL;
CREATE INDEX jobs_deadline ON jobs (run_deadline) WHERE status = 'IN_PROGRESS';
CREATE INDEX jobs_recent ON jobs (endpoint_id, seq);

CREATE TABLE stream_chunks (
    job_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    output TEXT NOT NULL,
    metrics TEXT,
    PRIMARY KEY (job_id, seq)
);

CREATE TABLE workers (
    id TEXT PRIMARY KEY,
    endpoint_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    version INTEGER NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    last_seen DOUBLE PRECISION,
    idle_since DOUBLE PRECISION,
    pid INTEGER,
    gpu TEXT,
    recycle BOOLEAN NOT NULL DEFAULT FALSE,
    -- The GPU indices a worker is pinned to (CUDA_VISIBLE_DEVICES), beside its GPU type name.
    gpu_ids TEXT
);
CREATE INDEX workers_endpoint ON workers (endpoint_id);

-- Stop signals in their own table so a stop outlives the job row it concerns.
CREATE TABLE stop_signals (
    worker_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY (worker_id, job_id)
);

CREATE TABLE webhook_deliveries (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    url TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',  -- pending, delivered, failed
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at DOUBLE PRECISION NOT NULL,
    last_error TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_job ON webhook_deliveries (job_id);
