-- Public model endpoints (domain/public_models.py): the same SQL on SQLite and PostgreSQL.

-- A model id or an endpoint published already matches a unique key: nothing is written.
-- name: publish_model
INSERT INTO public_models (model_id, endpoint_id, description, published_by, created_at)
VALUES (:model_id, :endpoint_id, :description, :published_by, :created_at)
ON CONFLICT DO NOTHING;

-- name: list_public_models
SELECT * FROM public_models ORDER BY model_id;

-- name: get_public_model
SELECT * FROM public_models WHERE model_id = :model_id;

-- name: unpublish_model
DELETE FROM public_models WHERE model_id = :model_id;

-- name: unpublish_endpoint
DELETE FROM public_models WHERE endpoint_id = :endpoint_id;
