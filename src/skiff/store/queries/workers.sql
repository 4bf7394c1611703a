-- Worker records: the same SQL on SQLite and PostgreSQL. ``update_worker`` sets the fields it
-- is given, so its statement is made per set of fields (rows.worker_update_sql).

-- name: save_worker
INSERT INTO workers (id, endpoint_id, kind, state, version, started_at, last_seen, idle_since,
                     pid, gpu, recycle, gpu_ids, owner, address, health_address)
VALUES (:id, :endpoint_id, :kind, :state, :version, :started_at, :last_seen, :idle_since,
        :pid, :gpu, :recycle, :gpu_ids, :owner, :address, :health_address)
ON CONFLICT (id) DO UPDATE SET
    endpoint_id = excluded.endpoint_id, kind = excluded.kind, state = excluded.state,
    version = excluded.version, started_at = excluded.started_at,
    last_seen = excluded.last_seen, idle_since = excluded.idle_since, pid = excluded.pid,
    gpu = excluded.gpu, recycle = excluded.recycle, gpu_ids = excluded.gpu_ids,
    owner = excluded.owner, address = excluded.address,
    health_address = excluded.health_address;

-- A worker registered twice (replicas racing) keeps the first record.
-- name: add_worker
INSERT INTO workers (id, endpoint_id, kind, state, version, started_at, last_seen, idle_since,
                     pid, gpu, recycle, gpu_ids, owner, address, health_address)
VALUES (:id, :endpoint_id, :kind, :state, :version, :started_at, :last_seen, :idle_since,
        :pid, :gpu, :recycle, :gpu_ids, :owner, :address, :health_address)
ON CONFLICT (id) DO NOTHING;

-- name: get_worker
SELECT * FROM workers WHERE id = :id;

-- name: list_workers
SELECT * FROM workers ORDER BY started_at;

-- name: list_workers_of_endpoint
SELECT * FROM workers WHERE endpoint_id = :endpoint_id ORDER BY started_at;

-- A worker seen for the first time since it started is ready: idle. Only through its own
-- endpoint: a caller of another names the id in vain (services/workers.py).
-- name: touch_worker
UPDATE workers
SET last_seen = :now,
    idle_since = CASE WHEN state = 'initializing' THEN :now ELSE idle_since END,
    state = CASE WHEN state = 'initializing' THEN 'idle' ELSE state END
WHERE id = :id AND endpoint_id = :endpoint_id
RETURNING *;

-- A load-balancing worker's first 200 from GET /ping: ready, unless told to stop meanwhile.
-- name: worker_ready
UPDATE workers
SET state = 'idle', idle_since = :now, last_seen = :now
WHERE id = :id AND state = 'initializing'
RETURNING *;

-- Requests in flight on a load-balancing worker (running) or none (idle since :idle_since);
-- a worker in any other state (stopping above all) is left as it is.
-- name: worker_serving
UPDATE workers
SET state = :state, idle_since = :idle_since
WHERE id = :id AND state IN ('idle', 'running')
RETURNING *;

-- name: delete_worker
DELETE FROM workers WHERE id = :worker_id;

-- name: delete_stop_signals_of_worker
DELETE FROM stop_signals WHERE worker_id = :worker_id;

-- name: set_lb_demand
INSERT INTO lb_demand (replica_id, endpoint_id, in_flight, waiting, updated_at)
VALUES (:replica_id, :endpoint_id, :in_flight, :waiting, :now)
ON CONFLICT (replica_id, endpoint_id) DO UPDATE SET
    in_flight = excluded.in_flight, waiting = excluded.waiting, updated_at = excluded.updated_at;

-- name: clear_lb_demand
DELETE FROM lb_demand WHERE replica_id = :replica_id AND endpoint_id = :endpoint_id;

-- What the other replicas hold now, per load-balancing endpoint (rows of the gone left out).
-- name: lb_demand_of_others
SELECT endpoint_id, SUM(in_flight) AS in_flight, SUM(waiting) AS waiting
FROM lb_demand
WHERE replica_id <> :replica_id AND updated_at >= :since
GROUP BY endpoint_id;

-- Rows of replicas gone long since.
-- name: drop_stale_lb_demand
DELETE FROM lb_demand WHERE updated_at < :before;
