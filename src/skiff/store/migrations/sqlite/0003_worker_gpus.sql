-- The GPU indices a worker is pinned to (CUDA_VISIBLE_DEVICES), beside its GPU type name.
ALTER TABLE workers ADD COLUMN gpu_ids TEXT;
