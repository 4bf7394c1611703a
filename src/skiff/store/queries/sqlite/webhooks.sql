-- Webhook secrets, SQLite's own text: a plain read (one writer runs at a time).

-- name: webhook_secret_of_user
SELECT webhook_secret FROM users WHERE id = :user_id;
