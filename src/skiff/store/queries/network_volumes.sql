-- Network volumes, per owner: the same SQL on SQLite and PostgreSQL. Which endpoints use one
-- is read from their specs, in each dialect's own JSON (queries/*/network_volumes.sql).

-- name: create_network_volume
INSERT INTO network_volumes (id, user_id, name, size_gb, data_center_id, created_at)
VALUES (:id, :user_id, :name, :size_gb, :data_center_id, :created_at);

-- name: list_network_volumes
SELECT id, name, size_gb, data_center_id, created_at FROM network_volumes
WHERE user_id = :user_id ORDER BY created_at, id;

-- Every owner's, for the meter (services/metering.py).
-- name: list_all_network_volumes
SELECT user_id, id, name, size_gb, data_center_id, created_at FROM network_volumes
ORDER BY created_at, id;

-- name: get_network_volume
SELECT id, name, size_gb, data_center_id, created_at FROM network_volumes
WHERE user_id = :user_id AND id = :id;

-- Grow only: a size below the stored one matches no row, and the volume stays as it is.
-- name: update_network_volume
UPDATE network_volumes SET name = :name, size_gb = :size_gb
WHERE user_id = :user_id AND id = :id AND size_gb <= :size_gb
RETURNING id, name, size_gb, data_center_id, created_at;

-- name: delete_network_volume
DELETE FROM network_volumes WHERE user_id = :user_id AND id = :id;
