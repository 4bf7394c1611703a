-- What one user holds of each kind a quota bounds (domain/quotas.py; store/operations.py
-- names the query of each kind).

-- name: count_endpoints_of_user
SELECT COUNT(*) AS n FROM endpoints WHERE user_id = :user_id;

-- name: count_templates_of_user
SELECT COUNT(*) AS n FROM templates WHERE user_id = :user_id;

-- name: count_network_volumes_of_user
SELECT COUNT(*) AS n FROM network_volumes WHERE user_id = :user_id;

-- name: count_pods_of_user
SELECT COUNT(*) AS n FROM pods WHERE user_id = :user_id;

-- name: count_api_keys_of_user
SELECT COUNT(*) AS n FROM api_keys WHERE user_id = :user_id AND revoked_at IS NULL;

-- name: count_secrets_of_user
SELECT COUNT(*) AS n FROM secrets WHERE user_id = :user_id;

-- name: count_registry_auths_of_user
SELECT COUNT(*) AS n FROM registry_auths WHERE user_id = :user_id;
