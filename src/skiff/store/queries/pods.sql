-- Pods, per owner: the same SQL on SQLite and PostgreSQL. The service writes the settings and
-- the desired status; the pod runner writes the placement and the start time: two writers of
-- disjoint columns, so neither undoes the other.

-- name: create_pod
INSERT INTO pods (id, user_id, name, spec, desired_status, version, restarts, created_at,
                  last_status_change, last_started_at, placement)
VALUES (:id, :user_id, :name, :spec, :desired_status, :version, :restarts, :created_at,
        :last_status_change, :last_started_at, :placement);

-- name: list_pods_of_user
SELECT * FROM pods WHERE user_id = :user_id ORDER BY created_at, id;

-- name: list_all_pods
SELECT * FROM pods ORDER BY created_at, id;

-- name: get_pod
SELECT * FROM pods WHERE user_id = :user_id AND id = :id;

-- name: find_pod
SELECT * FROM pods WHERE id = :id;

-- name: update_pod_settings
UPDATE pods SET name = :name, spec = :spec, desired_status = :desired_status,
                version = :version, restarts = :restarts,
                last_status_change = :last_status_change
WHERE user_id = :user_id AND id = :id
RETURNING *;

-- The pod runner's stop of a disabled owner's pod: what the owner's own stop writes, and only
-- while the pod is still wanted running (a delete or a stop meanwhile stays as it was).
-- name: stop_running_pod
UPDATE pods SET desired_status = 'EXITED', last_status_change = :now
WHERE id = :id AND desired_status = 'RUNNING'
RETURNING *;

-- name: set_pod_placement
UPDATE pods SET placement = :placement, last_started_at = :last_started_at
WHERE id = :id
RETURNING *;

-- name: delete_pod
DELETE FROM pods WHERE user_id = :user_id AND id = :id;
