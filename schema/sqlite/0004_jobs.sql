-- slate's database, version 4: jobs started through the API (`POST /jobs`) or the dashboard.

-- One row per job. Progress is written about once a second while it runs, so that `slate jobs`,
-- `slate status` and a restarted server see it; a job whose process died while it ran is found
-- `running` with an owner that is gone, and shown as interrupted.
CREATE TABLE jobs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind            TEXT NOT NULL,              -- copy | sync-once | diff
    src             TEXT NOT NULL,
    dst             TEXT NOT NULL,
    options         TEXT NOT NULL,              -- JSON, as accepted by POST /jobs
    state           TEXT NOT NULL,              -- queued running succeeded failed cancelled interrupted
    objects_done    INTEGER NOT NULL DEFAULT 0,
    objects_total   INTEGER NOT NULL DEFAULT 0,
    objects_failed  INTEGER NOT NULL DEFAULT 0,
    bytes_done      INTEGER NOT NULL DEFAULT 0,
    bytes_total     INTEGER NOT NULL DEFAULT 0,
    total_known     INTEGER NOT NULL DEFAULT 0, -- 1 once the listing is complete
    rate            REAL NOT NULL DEFAULT 0,    -- bytes per second, recent
    created_at      INTEGER NOT NULL,           -- unix milliseconds
    started_at      INTEGER,
    finished_at     INTEGER,
    error           TEXT,
    result          TEXT,                       -- JSON summary of a finished job
    owner           TEXT,                       -- "PID:START" of the process running it
    runs            INTEGER NOT NULL DEFAULT 0, -- times started (a resume adds one)
    version         INTEGER NOT NULL DEFAULT 0  -- grows with every change: SSE event ids
);

CREATE INDEX jobs_by_state ON jobs (state, id);
