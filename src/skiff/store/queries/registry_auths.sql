-- Container registry credentials, per owner: the same SQL on SQLite and PostgreSQL.

-- name: create_registry_auth
INSERT INTO registry_auths (id, user_id, name, username, password, created_at)
VALUES (:id, :user_id, :name, :username, :password, :created_at);

-- name: list_registry_auths
SELECT id, user_id, name, username, password, created_at FROM registry_auths
WHERE user_id = :user_id ORDER BY created_at;

-- name: get_registry_auth
SELECT id, user_id, name, username, password, created_at FROM registry_auths
WHERE user_id = :user_id AND id = :id;

-- name: delete_registry_auth
DELETE FROM registry_auths WHERE user_id = :user_id AND id = :id;

-- name: update_registry_auth_credentials
UPDATE registry_auths SET username = :username, password = :password
WHERE user_id = :user_id AND id = :id;

-- A user's settings (a public SSH key, for now): one row per user who set any.
-- name: get_user_pub_key
SELECT pub_key FROM user_settings WHERE user_id = :user_id;

-- name: set_user_pub_key
INSERT INTO user_settings (user_id, pub_key) VALUES (:user_id, :pub_key)
ON CONFLICT (user_id) DO UPDATE SET pub_key = :pub_key;
