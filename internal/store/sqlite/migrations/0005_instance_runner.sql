-- The just-in-time runner registration belongs to the instance that starts
-- it, not to the job: GitHub may give the runner another job with the same
-- labels. Jobs keep the runner's name only.
ALTER TABLE instances ADD COLUMN runner_name TEXT NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN runner_config TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs DROP COLUMN runner_config;
