-- Users' secrets (their values sealed by the store): the same SQL on SQLite and PostgreSQL.

-- name: create_user_secret
INSERT INTO secrets (id, user_id, name, value, created_at, updated_at)
VALUES (:id, :user_id, :name, :value, :created_at, :created_at);

-- name: list_user_secrets
SELECT id, name, created_at, updated_at FROM secrets
WHERE user_id = :user_id ORDER BY name;

-- name: get_user_secret
SELECT id, name, created_at, updated_at FROM secrets
WHERE user_id = :user_id AND id = :id;

-- Their values, by name, for a worker's or pod's environment.
-- name: user_secret_values
SELECT name, value FROM secrets WHERE user_id = :user_id;

-- name: update_user_secret
UPDATE secrets SET value = :value, updated_at = :now
WHERE user_id = :user_id AND id = :id
RETURNING id, name, created_at, updated_at;

-- name: delete_user_secret
DELETE FROM secrets WHERE user_id = :user_id AND id = :id;
