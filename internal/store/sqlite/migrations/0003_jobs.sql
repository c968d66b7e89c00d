-- Jobs: one row per GitHub workflow job bullpen accepted or rejected. Times
-- are fixed-width UTC text like the instances' (NULL is the zero time);
-- labels and spec are JSON. runner_config is a credential.
CREATE TABLE jobs (
    id            INTEGER NOT NULL PRIMARY KEY,
    run_id        INTEGER NOT NULL DEFAULT 0,
    run_attempt   INTEGER NOT NULL DEFAULT 0,
    repo          TEXT    NOT NULL DEFAULT '',
    name          TEXT    NOT NULL DEFAULT '',
    workflow      TEXT    NOT NULL DEFAULT '',
    labels        TEXT    NOT NULL DEFAULT 'null',
    status        TEXT    NOT NULL,
    route         TEXT    NOT NULL DEFAULT '',
    via           TEXT    NOT NULL DEFAULT '',
    pool          TEXT    NOT NULL DEFAULT '',
    runner        TEXT    NOT NULL DEFAULT '',
    spec          TEXT    NOT NULL DEFAULT '{}',
    instance_id   TEXT    NOT NULL DEFAULT '',
    runner_name   TEXT    NOT NULL DEFAULT '',
    runner_id     INTEGER NOT NULL DEFAULT 0,
    runner_config TEXT    NOT NULL DEFAULT '',
    reason        TEXT    NOT NULL DEFAULT '',
    conclusion    TEXT    NOT NULL DEFAULT '',
    attempts      INTEGER NOT NULL DEFAULT 0,
    version       INTEGER NOT NULL,
    created_at    TEXT    NOT NULL,
    updated_at    TEXT    NOT NULL,
    queued_at     TEXT,
    assigned_at   TEXT,
    started_at    TEXT,
    completed_at  TEXT
) STRICT;

-- Listing order, the filters the status API and the loops use, and the
-- retention sweep (final jobs by last change).
CREATE INDEX jobs_created_id ON jobs (created_at, id);
CREATE INDEX jobs_status     ON jobs (status, updated_at);
CREATE INDEX jobs_pool       ON jobs (pool, status);
CREATE INDEX jobs_instance   ON jobs (instance_id);
CREATE INDEX jobs_updated    ON jobs (updated_at);
