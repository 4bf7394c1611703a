-- Templates, per owner, stored as their JSON spec: the same SQL on SQLite and PostgreSQL.

-- name: create_template
INSERT INTO templates (id, user_id, name, spec, created_at)
VALUES (:id, :user_id, :name, :spec, :created_at);

-- name: list_templates
SELECT spec FROM templates WHERE user_id = :user_id ORDER BY created_at;

-- name: get_template
SELECT spec FROM templates WHERE user_id = :user_id AND id = :id;

-- name: update_template
UPDATE templates SET name = :name, spec = :spec WHERE user_id = :user_id AND id = :id;

-- name: delete_template
DELETE FROM templates WHERE user_id = :user_id AND id = :id;
