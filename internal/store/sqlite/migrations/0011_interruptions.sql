-- Spot interruptions heard of lately, which every process's spot circuit
-- breaker counts; a row is deleted once it has expired.
CREATE TABLE interruptions (
	id      TEXT PRIMARY KEY,
	runner  TEXT NOT NULL,
	at      TEXT NOT NULL,
	expires TEXT NOT NULL
);
CREATE INDEX interruptions_by_time ON interruptions (at, id);
