-- A job sent back to queued together with a change of its instance, whose
-- queue message may not be out yet (the reaper re-sends it after a crash).
ALTER TABLE jobs ADD COLUMN send_pending INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_send_pending ON jobs (send_pending) WHERE send_pending != 0;
