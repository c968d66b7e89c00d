-- A started job whose machine was taken back by the cloud (a spot
-- interruption), and whether GitHub was asked to re-run it.
ALTER TABLE jobs ADD COLUMN interrupted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN rerun INTEGER NOT NULL DEFAULT 0;
