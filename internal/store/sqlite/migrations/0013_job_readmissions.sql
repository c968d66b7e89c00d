-- How often a rejected job went back to queued, kept on the row so that
-- the bound on readmissions outlives a restart; apart from attempts, which
-- count failures to serve the job.
ALTER TABLE jobs ADD COLUMN readmissions INTEGER NOT NULL DEFAULT 0;
