-- Users, their API keys and the server's own secrets: the same SQL on SQLite and PostgreSQL.

-- name: get_secret
SELECT value FROM meta WHERE name = :name;

-- The row may exist already on PostgreSQL, where replicas race to make it; SQLite's writer
-- only inserts after reading none.
-- name: add_secret
INSERT INTO meta (name, value) VALUES (:name, :value) ON CONFLICT (name) DO NOTHING;

-- name: create_user
INSERT INTO users (id, name, is_admin, created_at) VALUES (:id, :name, :is_admin, :created_at);

-- name: get_user_by_name
SELECT id, name, is_admin, created_at FROM users WHERE name = :name;

-- name: add_api_key
INSERT INTO api_keys (id, user_id, key_hash, hint, label, created_at)
VALUES (:id, :user_id, :key_hash, :hint, :label, :created_at);

-- name: find_api_key
SELECT k.id AS key_id, k.user_id, k.hint, k.label, k.created_at AS key_created_at,
       k.revoked_at, u.name AS user_name, u.is_admin, u.created_at AS user_created_at
FROM api_keys k JOIN users u ON u.id = k.user_id
WHERE k.key_hash = :key_hash;

-- name: list_api_keys
SELECT k.id AS key_id, k.user_id, k.hint, k.label, k.created_at AS key_created_at,
       k.revoked_at, u.name AS user_name, u.is_admin, u.created_at AS user_created_at
FROM api_keys k JOIN users u ON u.id = k.user_id
ORDER BY k.created_at;

-- name: revoke_api_key
UPDATE api_keys SET revoked_at = :now WHERE id = :id AND revoked_at IS NULL;
