-- Network volumes (domain/volumes.py), per owner. Each is a directory on the server
-- (volume_dirs.py); an endpoint names one in its spec's networkVolumeId.
CREATE TABLE network_volumes (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    size_gb INTEGER NOT NULL,
    data_center_id TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX network_volumes_user ON network_volumes (user_id);
