-- Network volumes, SQLite's own text: an endpoint's or a pod's spec is JSON read with
-- json_extract.

-- name: endpoints_using_network_volume
SELECT id FROM endpoints
WHERE user_id = :user_id AND json_extract(spec, '$.networkVolumeId') = :volume_id
ORDER BY created_at, id;

-- A pod being deleted (TERMINATED) no longer counts: it is on its way out.
-- name: pods_using_network_volume
SELECT id FROM pods
WHERE user_id = :user_id AND json_extract(spec, '$.networkVolumeId') = :volume_id
  AND desired_status <> 'TERMINATED'
ORDER BY created_at, id;
