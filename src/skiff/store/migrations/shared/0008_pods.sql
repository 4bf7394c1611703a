-- Pods (domain/pods.py), per owner: their resolved settings as JSON (spec), what the user asked
-- for (desired_status), and where the instance runs now (placement, JSON), which the pod
-- runner alone writes.
CREATE TABLE pods (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    desired_status TEXT NOT NULL,
    version INTEGER NOT NULL,
    restarts INTEGER NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    last_status_change DOUBLE PRECISION NOT NULL,
    last_started_at DOUBLE PRECISION,
    placement TEXT NOT NULL
);
CREATE INDEX pods_user ON pods (user_id);
