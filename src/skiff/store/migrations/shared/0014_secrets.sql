-- Secrets, per owner: a name templates refer to (`{{ RUNPOD_SECRET_name }}`) and its value,
-- sealed with the key kept outside the database (store/sealing.py), as every other secret
-- column is from this version on (the store seals the values of earlier versions at start).
CREATE TABLE secrets (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    UNIQUE (user_id, name)
);
