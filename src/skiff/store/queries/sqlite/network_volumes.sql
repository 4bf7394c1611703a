-- Network volumes, SQLite's own text: an endpoint's spec is JSON read with json_extract.

-- name: endpoints_using_network_volume
SELECT id FROM endpoints
WHERE user_id = :user_id AND json_extract(spec, '$.networkVolumeId') = :volume_id
ORDER BY created_at, id;
