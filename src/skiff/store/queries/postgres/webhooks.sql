-- Webhook secrets, PostgreSQL's own text: the owner's row stays locked until the secret is set,
-- so replicas making one at once agree on it.

-- name: webhook_secret_of_user
SELECT webhook_secret FROM users WHERE id = :user_id FOR UPDATE;
