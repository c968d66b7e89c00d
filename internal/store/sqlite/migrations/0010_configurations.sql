-- The configuration file last put in force from each source, read at
-- start when the source cannot be read or does not validate.
CREATE TABLE configurations (
	source TEXT PRIMARY KEY,
	data   BLOB NOT NULL,
	put_at TEXT NOT NULL
);
