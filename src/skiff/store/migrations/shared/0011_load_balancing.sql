-- Load-balancing endpoints. Where a worker answers (host:port for its requests, and for its
-- GET /ping), recorded once its process runs so that whichever replica a request reaches can
-- pass it on. Queue-based workers, which call in instead, leave both empty.
ALTER TABLE workers ADD COLUMN address TEXT;
ALTER TABLE workers ADD COLUMN health_address TEXT;

-- Requests each replica holds for a load-balancing endpoint (passed to a worker, or waiting
-- for one), so the leader's scaler counts those that reached other replicas too. A row is
-- kept fresh while it is not zero and removed when it is; one not refreshed lately belongs to
-- a replica that is gone and is not counted.
CREATE TABLE lb_demand (
    replica_id TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    in_flight INTEGER NOT NULL,
    waiting INTEGER NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (replica_id, endpoint_id)
);
