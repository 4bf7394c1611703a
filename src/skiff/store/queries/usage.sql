-- Usage for billing, the same SQL on SQLite and PostgreSQL. The meter (services/metering.py)
-- opens, touches and ends usages; the billing service reads them.

-- An ended usage (ended_at given) is recorded as it is; an open one only if its subject has
-- none open.
-- name: open_usage
INSERT INTO usage (id, subject, user_id, kind, started_at, ended_at, last_seen, endpoint_id,
                   pod_id, instance_id, volume_id, gpu_type, gpu_count, cpu_flavor, vcpus,
                   disk_gb)
VALUES (:id, :subject, :user_id, :kind, :started_at, :ended_at, :last_seen, :endpoint_id, :pod_id,
        :instance_id, :volume_id, :gpu_type, :gpu_count, :cpu_flavor, :vcpus, :disk_gb)
ON CONFLICT (subject) WHERE ended_at IS NULL DO NOTHING;

-- A run of a public model's caller's job, recorded ended in the transaction that ended it
-- (store/operations.py): its id names the run, so a run recorded again is kept once.
-- name: record_call_usage
INSERT INTO usage (id, subject, user_id, kind, started_at, ended_at, last_seen, endpoint_id,
                   pod_id, instance_id, volume_id, gpu_type, gpu_count, cpu_flavor, vcpus,
                   disk_gb)
VALUES (:id, :subject, :user_id, :kind, :started_at, :ended_at, :last_seen, :endpoint_id, :pod_id,
        :instance_id, :volume_id, :gpu_type, :gpu_count, :cpu_flavor, :vcpus, :disk_gb)
ON CONFLICT DO NOTHING;

-- What such a run is billed at (domain/billing.py call_usage): the endpoint's spec, the id it
-- is published under, and the GPUs of the worker that ran it (none once it is gone).
-- name: call_rate
SELECT e.spec, m.model_id, w.gpu, w.gpu_ids
FROM endpoints e
LEFT JOIN public_models m ON m.endpoint_id = e.id
LEFT JOIN workers w ON w.id = :worker_id
WHERE e.id = :endpoint_id;

-- name: open_usages
SELECT * FROM usage WHERE ended_at IS NULL ORDER BY started_at, id;

-- Never before its start, nor more than :gap after it was last seen: a usage of a killed
-- server that a restarted one ends (its worker forgotten) does not bill the time between.
-- name: end_usage
UPDATE usage SET ended_at = CASE
    WHEN :ended_at > last_seen + :gap THEN
        CASE WHEN last_seen + :gap > started_at THEN last_seen + :gap ELSE started_at END
    WHEN :ended_at > started_at THEN :ended_at
    ELSE started_at
END
WHERE subject = :subject AND ended_at IS NULL;

-- name: touch_usages
UPDATE usage SET last_seen = :now WHERE ended_at IS NULL AND last_seen < :now;

-- name: end_unseen_usages
UPDATE usage SET ended_at = last_seen WHERE ended_at IS NULL AND last_seen < :before;

-- name: usages_of_user
SELECT * FROM usage
WHERE user_id = :user_id AND started_at < :until AND (ended_at IS NULL OR ended_at > :since)
ORDER BY started_at, id;
