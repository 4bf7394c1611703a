-- Webhook deliveries, stored in the transaction that made their job final, and the owners'
-- signing secrets. The same SQL on SQLite and PostgreSQL, but for the secret's locking read.

-- ``owner_id``: the endpoint's owner, whose worker wrote the ``written_bytes`` of the payload.
-- name: add_webhook_delivery
INSERT INTO webhook_deliveries (id, job_id, endpoint_id, user_id, url, payload,
                                next_attempt_at, created_at, owner_id, written_bytes)
VALUES (:id, :job_id, :endpoint_id, :user_id, :url, :payload, :next_attempt_at, :created_at,
        (SELECT user_id FROM endpoints WHERE id = :endpoint_id), :written_bytes);

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

-- ``next_attempt_at`` NULL keeps the one set. An ended delivery (delivered, or failed for good)
-- lets go of its payload, a copy of its job's input and result that counted against its user
-- (job_bytes.sql); its record is kept a day (prune_ended_webhook_deliveries).
-- name: record_webhook_attempt
UPDATE webhook_deliveries
SET attempts = attempts + 1, status = :status, last_error = :error,
    next_attempt_at = COALESCE(:next_attempt_at, next_attempt_at),
    finished_at = CASE WHEN :status = 'pending' THEN NULL ELSE CAST(:now AS DOUBLE PRECISION) END,
    payload = CASE WHEN :status = 'pending' THEN payload ELSE '' END,
    written_bytes = CASE WHEN :status = 'pending' THEN written_bytes ELSE 0 END
WHERE id = :id;

-- name: prune_ended_webhook_deliveries
DELETE FROM webhook_deliveries WHERE id IN (
    SELECT id FROM webhook_deliveries
    WHERE status <> 'pending' AND finished_at < :before LIMIT :limit
);

-- name: set_webhook_secret
UPDATE users SET webhook_secret = :secret WHERE id = :user_id;
