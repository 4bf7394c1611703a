-- The sealed columns (store/sealing.py), read and written whole when a database's values are
-- first sealed or sealed again with a new key: the same SQL on SQLite and PostgreSQL.

-- name: replace_secret
UPDATE meta SET value = :value WHERE name = :name;

-- name: sealed_registry_passwords
SELECT id, password AS value FROM registry_auths;

-- name: reseal_registry_password
UPDATE registry_auths SET password = :value WHERE id = :id;

-- name: sealed_s3_configs
SELECT id, s3_config AS value FROM jobs WHERE s3_config IS NOT NULL;

-- name: reseal_s3_config
UPDATE jobs SET s3_config = :value WHERE id = :id;

-- name: sealed_webhook_secrets
SELECT id, webhook_secret AS value FROM users
WHERE webhook_secret IS NOT NULL AND webhook_secret <> '';

-- name: reseal_webhook_secret
UPDATE users SET webhook_secret = :value WHERE id = :id;

-- name: sealed_secrets
SELECT id, value FROM secrets;

-- name: reseal_secret
UPDATE secrets SET value = :value WHERE id = :id;
