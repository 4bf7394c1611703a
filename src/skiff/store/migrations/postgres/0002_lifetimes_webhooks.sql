-- Job lifetimes, stop signals and webhook deliveries: SQLite migration 0002. On PostgreSQL they
-- are part of 0001_init already (the PostgreSQL schema began at the model of SQLite's 0003);
-- this file keeps the two sets numbered alike, so one number names one change of the model.
SELECT 1;
