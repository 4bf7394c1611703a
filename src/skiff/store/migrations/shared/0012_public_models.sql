-- Public model endpoints: an administrator's endpoint published under a model id, which every
-- user with a key calls as /v2/{model_id}/... with the usual bodies. One id per endpoint.
CREATE TABLE public_models (
    model_id TEXT PRIMARY KEY,
    endpoint_id TEXT NOT NULL UNIQUE,
    description TEXT NOT NULL DEFAULT '',
    published_by TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);

-- Who submitted a job through a public model's id when it is not the endpoint's owner: that
-- caller alone reads, streams, cancels or retries it. Null: the owner's own job.
ALTER TABLE jobs ADD COLUMN caller_id TEXT;
