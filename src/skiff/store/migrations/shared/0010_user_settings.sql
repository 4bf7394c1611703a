-- A user's settings beside their account: the public SSH key the runpod SDK's
-- update_user_settings sets (and its get_user reads back as pubKey).
CREATE TABLE user_settings (
    user_id TEXT PRIMARY KEY,
    pub_key TEXT NOT NULL DEFAULT ''
);
