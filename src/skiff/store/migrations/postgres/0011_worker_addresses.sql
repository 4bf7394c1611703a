-- Where a load-balancing endpoint's worker answers (host:port for its requests, and for its
-- GET /ping), recorded once its process runs so that whichever replica a request reaches can
-- pass it on. Queue-based workers, which call in instead, leave both empty.
ALTER TABLE workers ADD COLUMN address TEXT;
ALTER TABLE workers ADD COLUMN health_address TEXT;
