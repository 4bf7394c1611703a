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
