-- Endpoints, stored as their JSON spec: the same SQL on SQLite and PostgreSQL.

-- name: create_endpoint
INSERT INTO endpoints (id, user_id, template_id, spec, version, created_at)
VALUES (:id, :user_id, :template_id, :spec, :version, :created_at);

-- name: list_endpoints
SELECT id, user_id, spec, version, created_at FROM endpoints ORDER BY created_at;

-- name: list_endpoints_of_user
SELECT id, user_id, spec, version, created_at FROM endpoints
WHERE user_id = :user_id ORDER BY created_at;

-- name: get_endpoint
SELECT id, user_id, spec, version, created_at FROM endpoints WHERE id = :id;

-- ``bump`` is 1 to raise the version, 0 to keep it.
-- name: update_endpoint
UPDATE endpoints SET spec = :spec, template_id = :template_id, version = version + :bump
WHERE id = :id RETURNING id, user_id, spec, version, created_at;

-- name: bump_endpoint_versions
UPDATE endpoints SET version = version + 1 WHERE template_id = :template_id RETURNING id;

-- name: endpoints_using_template
SELECT id FROM endpoints WHERE template_id = :template_id;

-- An endpoint goes with everything it holds, in this order, in one transaction.
-- name: delete_stream_chunks_of_endpoint
DELETE FROM stream_chunks WHERE job_id IN (SELECT id FROM jobs WHERE endpoint_id = :endpoint_id);

-- name: delete_jobs_of_endpoint
DELETE FROM jobs WHERE endpoint_id = :endpoint_id;

-- name: delete_workers_of_endpoint
DELETE FROM workers WHERE endpoint_id = :endpoint_id;

-- name: delete_endpoint
DELETE FROM endpoints WHERE id = :endpoint_id;

-- The latest failed worker start of an endpoint (JSON), or NULL.
-- name: set_worker_failure
UPDATE endpoints SET worker_failure = :failure WHERE id = :endpoint_id;

-- name: worker_failure
SELECT worker_failure FROM endpoints WHERE id = :endpoint_id;

-- name: endpoint_owner
SELECT user_id FROM endpoints WHERE id = :endpoint_id;
