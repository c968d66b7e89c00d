-- The instance a provisioner is launching for a queued job, before any
-- instance is bound to it: a second message for the job is put off while
-- that launch may still serve it.
ALTER TABLE jobs ADD COLUMN launched_on TEXT NOT NULL DEFAULT '';
