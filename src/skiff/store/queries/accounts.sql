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
SELECT id, name, is_admin, created_at, disabled_at FROM users WHERE name = :name;

-- name: get_user
SELECT id, name, is_admin, created_at, disabled_at FROM users WHERE id = :id;

-- name: list_users
SELECT id, name, is_admin, created_at, disabled_at FROM users ORDER BY created_at, name;

-- name: set_user_disabled
UPDATE users SET disabled_at = :disabled_at WHERE id = :id;

-- What the leader's loops read once a pass: the owners whose workers and pods must not run.
-- name: disabled_user_ids
SELECT id FROM users WHERE disabled_at IS NOT NULL;

-- name: add_api_key
INSERT INTO api_keys (id, user_id, key_hash, hint, label, created_at, permissions, endpoints)
VALUES (:id, :user_id, :key_hash, :hint, :label, :created_at, :permissions, :endpoints);

-- name: find_api_key
SELECT k.id AS key_id, k.user_id, k.hint, k.label, k.created_at AS key_created_at,
       k.revoked_at, k.permissions, k.endpoints, u.name AS user_name, u.is_admin,
       u.created_at AS user_created_at, u.disabled_at
FROM api_keys k JOIN users u ON u.id = k.user_id
WHERE k.key_hash = :key_hash;

-- name: list_api_keys
SELECT k.id AS key_id, k.user_id, k.hint, k.label, k.created_at AS key_created_at,
       k.revoked_at, k.permissions, k.endpoints, u.name AS user_name, u.is_admin,
       u.created_at AS user_created_at, u.disabled_at
FROM api_keys k JOIN users u ON u.id = k.user_id
ORDER BY k.created_at;

-- name: list_user_api_keys
SELECT k.id AS key_id, k.user_id, k.hint, k.label, k.created_at AS key_created_at,
       k.revoked_at, k.permissions, k.endpoints, u.name AS user_name, u.is_admin,
       u.created_at AS user_created_at, u.disabled_at
FROM api_keys k JOIN users u ON u.id = k.user_id
WHERE k.user_id = :user_id
ORDER BY k.created_at;

-- name: revoke_api_key
UPDATE api_keys SET revoked_at = :now WHERE id = :id AND revoked_at IS NULL;

-- A user revokes only their own keys: another user's key id is as unknown as a made-up one.
-- name: revoke_user_api_key
UPDATE api_keys SET revoked_at = :now
WHERE id = :id AND user_id = :user_id AND revoked_at IS NULL;
