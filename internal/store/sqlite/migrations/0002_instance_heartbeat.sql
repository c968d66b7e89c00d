-- The agent's last heartbeat, kept apart from the guarded fields: recording
-- one is not a transition and does not change the version.
ALTER TABLE instances ADD COLUMN heartbeat TEXT;
