-- Webhook deliveries, stored in the transaction that made their job final, and the owners'
-- signing secrets. The same SQL on SQLite and PostgreSQL, but for the secret's locking read.

-- name: add_webhook_delivery
INSERT INTO webhook_deliveries (id, job_id, endpoint_id, user_id, url, payload,
                                next_attempt_at, created_at)
VALUES (:id, :job_id, :endpoint_id, :user_id, :url, :payload, :next_attempt_at, :created_at);

-- Taken in turns between users, each user's oldest first: one user's backlog (receivers that
-- never answer hold a sender's slot for the whole timeout) does not keep anyone else's waiting.
-- name: due_webhook_deliveries
SELECT * FROM (
    SELECT d.*, u.webhook_secret AS secret,
           ROW_NUMBER() OVER (PARTITION BY d.user_id ORDER BY d.next_attempt_at, d.id) AS turn
    FROM webhook_deliveries d LEFT JOIN users u ON u.id = d.user_id
    WHERE d.status = 'pending' AND d.next_attempt_at <= :now
) due
ORDER BY turn, next_attempt_at, id LIMIT :limit;

-- ``next_attempt_at`` NULL keeps the one set.
-- name: record_webhook_attempt
UPDATE webhook_deliveries
SET attempts = attempts + 1, status = :status, last_error = :error,
    next_attempt_at = COALESCE(:next_attempt_at, next_attempt_at),
    finished_at = CASE WHEN :status = 'pending' THEN NULL ELSE CAST(:now AS DOUBLE PRECISION) END
WHERE id = :id;

-- name: set_webhook_secret
UPDATE users SET webhook_secret = :secret WHERE id = :user_id;
