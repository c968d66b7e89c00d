-- Agent credentials, as hashes only: the launch's bootstrap secret and the
-- instance's own token (unique while set, so a token names one instance).
ALTER TABLE instances ADD COLUMN bootstrap_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN agent_token_hash TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX instances_agent_token ON instances (agent_token_hash) WHERE agent_token_hash != '';
