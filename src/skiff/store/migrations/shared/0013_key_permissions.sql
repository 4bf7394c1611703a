-- What each API key may do (domain/permissions.py): all, read or restricted; a restricted
-- key's endpoints are a JSON object of endpoint id -> read | read_write. Keys made before
-- keep doing everything, as they did.
ALTER TABLE api_keys ADD COLUMN permissions TEXT NOT NULL DEFAULT 'all';
ALTER TABLE api_keys ADD COLUMN endpoints TEXT NOT NULL DEFAULT '{}';

-- A disabled user's keys and console sessions are refused; nothing of theirs is deleted.
ALTER TABLE users ADD COLUMN disabled_at DOUBLE PRECISION;
