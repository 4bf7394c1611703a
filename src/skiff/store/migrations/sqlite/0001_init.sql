-- skiff schema, version 1 (SQLite). Times are seconds since the epoch (REAL).
CREATE TABLE meta (
    name TEXT PRIMARY KEY,
    value BLOB NOT NULL
);

CREATE TABLE users (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    is_admin INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    key_hash TEXT NOT NULL UNIQUE,
    hint TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    revoked_at REAL
);

CREATE TABLE registry_auths (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    username TEXT NOT NULL,
    password TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (user_id, name)
);

CREATE TABLE templates (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (user_id, name)
);

CREATE TABLE endpoints (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    template_id TEXT NOT NULL,
    spec TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    created_at REAL NOT NULL
);
CREATE INDEX endpoints_user ON endpoints (user_id);
CREATE INDEX endpoints_template ON endpoints (template_id);

CREATE TABLE jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- submission order
    id TEXT NOT NULL UNIQUE,
    endpoint_id TEXT NOT NULL,
    status TEXT NOT NULL,
    input TEXT NOT NULL,
    execution_timeout_ms INTEGER NOT NULL,
    ttl_ms INTEGER NOT NULL,
    low_priority INTEGER NOT NULL DEFAULT 0,
    webhook TEXT,
    s3_config TEXT,
    submitted_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    output TEXT,
    error TEXT,
    worker_id TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    retries INTEGER NOT NULL DEFAULT 0,
    lease_until REAL,
    stop_pending INTEGER NOT NULL DEFAULT 0,
    stream_cursor INTEGER NOT NULL DEFAULT 0
);
-- The claim walks this: queued jobs of one endpoint, normal priority first, oldest first.
CREATE INDEX jobs_queue ON jobs (endpoint_id, low_priority, seq) WHERE status = 'IN_QUEUE';
CREATE INDEX jobs_endpoint_status ON jobs (endpoint_id, status);
CREATE INDEX jobs_held ON jobs (worker_id) WHERE status = 'IN_PROGRESS' OR stop_pending = 1;
CREATE INDEX jobs_lease ON jobs (lease_until) WHERE status = 'IN_PROGRESS';

CREATE TABLE stream_chunks (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    output TEXT NOT NULL,
    metrics TEXT,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;

CREATE TABLE workers (
    id TEXT PRIMARY KEY,
    endpoint_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    version INTEGER NOT NULL,
    started_at REAL NOT NULL,
    last_seen REAL,
    idle_since REAL,
    pid INTEGER,
    gpu TEXT,
    recycle INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX workers_endpoint ON workers (endpoint_id);
