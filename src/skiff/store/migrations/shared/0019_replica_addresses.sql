-- Each replica's own interfaces' addresses, space-separated, as it read them when it registered:
-- no replica's webhook deliveries may reach another replica's host, by these or by its URL's
-- (services/host_addresses.py).
ALTER TABLE replicas ADD COLUMN addresses TEXT NOT NULL DEFAULT '';
