-- The interrupted jobs not re-run yet, which the reaper reads every cycle:
-- a few among many, in the order they are listed.
CREATE INDEX jobs_to_rerun ON jobs (created_at, id) WHERE interrupted != 0 AND rerun = 0;
