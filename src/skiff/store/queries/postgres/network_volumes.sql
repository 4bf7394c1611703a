-- Network volumes, PostgreSQL's own text: an endpoint's spec is JSON kept as text.

-- name: endpoints_using_network_volume
SELECT id FROM endpoints
WHERE user_id = :user_id AND (spec::jsonb ->> 'networkVolumeId') = :volume_id
ORDER BY created_at, id;
