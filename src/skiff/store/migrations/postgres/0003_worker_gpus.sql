-- The GPU indices a worker is pinned to: SQLite migration 0003. On PostgreSQL the column is part
-- of 0001_init already; this file keeps the two sets numbered alike.
SELECT 1;
