-- Instances: one row per machine bullpen owns. Times are fixed-width UTC
-- text (2006-01-02T15:04:05.000000000Z), so text order is time order; NULL
-- means the zero time.
CREATE TABLE instances (
    id            TEXT    NOT NULL PRIMARY KEY,
    cloud_id      TEXT    NOT NULL DEFAULT '',
    pool          TEXT    NOT NULL DEFAULT '',
    role          TEXT    NOT NULL DEFAULT '',
    runner        TEXT    NOT NULL DEFAULT '',
    spec_hash     TEXT    NOT NULL DEFAULT '',
    launch_id     TEXT    NOT NULL DEFAULT '',
    state         TEXT    NOT NULL,
    job           TEXT    NOT NULL DEFAULT '',
    job_started   INTEGER NOT NULL DEFAULT 0,
    version       INTEGER NOT NULL,
    deadline      TEXT,
    created_at    TEXT    NOT NULL,
    updated_at    TEXT    NOT NULL,
    state_since   TEXT,
    running_since TEXT,
    jobs_served   INTEGER NOT NULL DEFAULT 0,
    reason        TEXT    NOT NULL DEFAULT '',
    instance_type TEXT    NOT NULL DEFAULT '',
    usage_class   TEXT    NOT NULL DEFAULT '',
    cpu           INTEGER NOT NULL DEFAULT 0,
    memory_mib    INTEGER NOT NULL DEFAULT 0
) STRICT;

-- Listing order, and the filters the loops use.
CREATE INDEX instances_created_id ON instances (created_at, id);
CREATE INDEX instances_state      ON instances (state, created_at);
CREATE INDEX instances_pool       ON instances (pool, state);
CREATE INDEX instances_runner     ON instances (runner, state);
CREATE INDEX instances_job        ON instances (job);
CREATE INDEX instances_cloud_id   ON instances (cloud_id);
CREATE INDEX instances_deadline   ON instances (deadline);

-- What the converger last observed per pool, as the JSON of domain.PoolStatus.
CREATE TABLE pool_status (
    name       TEXT NOT NULL PRIMARY KEY,
    doc        TEXT NOT NULL,
    updated_at TEXT NOT NULL
) STRICT;

-- Named, time-limited rights to run a loop.
CREATE TABLE leases (
    name       TEXT NOT NULL PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at TEXT NOT NULL
) STRICT;
