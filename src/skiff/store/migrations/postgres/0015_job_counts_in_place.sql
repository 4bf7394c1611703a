-- Nothing changes on PostgreSQL: SQLite's job counts are now kept in place (sqlite/0015), while
-- here each change still appends a delta (0005), since replicas writing at once would queue on
-- one counter row. This file keeps the two migration sets numbered alike.
SELECT 1;
