-- Usage (domain/billing.py): one row per interval that a worker or a pod instance held its
-- resources, or that a volume had one size. ended_at is null while it lasts; last_seen is when
-- the meter last saw it, so a usage left open by a killed server ends there and the time no
-- server metered is not billed. subject names what is metered ("worker:ID", "pod:ID",
-- "pod_volume:ID", "network_volume:ID"); at most one usage of a subject is open at a time,
-- which is what keeps a second from being counted twice, whichever replica meters it.
CREATE TABLE usage (
    id TEXT PRIMARY KEY,
    subject TEXT NOT NULL,
    user_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    ended_at DOUBLE PRECISION,
    last_seen DOUBLE PRECISION NOT NULL,
    endpoint_id TEXT,
    pod_id TEXT,
    instance_id TEXT,
    volume_id TEXT,
    gpu_type TEXT,
    gpu_count INTEGER NOT NULL DEFAULT 0,
    cpu_flavor TEXT,
    vcpus INTEGER NOT NULL DEFAULT 0,
    disk_gb INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX usage_open_subject ON usage (subject) WHERE ended_at IS NULL;
CREATE INDEX usage_user_time ON usage (user_id, started_at);
