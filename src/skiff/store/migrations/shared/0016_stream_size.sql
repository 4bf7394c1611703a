-- What a job's stream holds, in characters of its stored JSON (domain/results.py
-- stream_size): a stream is capped (SKIFF_STREAM_MAX_MB) so that one tenant's worker cannot
-- fill the database's disk one chunk at a time. A job run again starts from 0.
ALTER TABLE jobs ADD COLUMN stream_size INTEGER NOT NULL DEFAULT 0;
