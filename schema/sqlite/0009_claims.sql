-- Competing workers: a pending key is claimed by one worker at a time, until its claim
-- expires (a worker renews its claims while it lives; a dead worker's expire and another
-- worker takes them). `claimed_host` lets a worker restarted on the same host free the claims
-- of its dead predecessor at once instead of waiting for their expiry.
ALTER TABLE inbox ADD COLUMN claimed_by TEXT;
ALTER TABLE inbox ADD COLUMN claimed_host TEXT;
ALTER TABLE inbox ADD COLUMN claim_until INTEGER NOT NULL DEFAULT 0;

-- a worker renews its claims through this index
CREATE INDEX inbox_by_claimer ON inbox (claimed_by) WHERE claimed_by IS NOT NULL;

-- Who applied which key and when (unix ms), kept for a while (pruned with the tombstones'
-- schedule): what a fleet's operator asks after an incident, and what the tests check.
CREATE TABLE applies (
    pair_id     INTEGER NOT NULL,
    key         TEXT NOT NULL,
    worker      TEXT NOT NULL,
    host        TEXT NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    outcome     TEXT NOT NULL
);
CREATE INDEX applies_by_key ON applies (pair_id, key, started_at);
CREATE INDEX applies_by_time ON applies (finished_at);

-- Jobs on any worker: the host of the process running a job, and when it last wrote its
-- progress (every second while it runs): a worker of another host cannot ask whether that
-- process lives, and reads a job whose heartbeat stopped as interrupted.
ALTER TABLE jobs ADD COLUMN host TEXT;
ALTER TABLE jobs ADD COLUMN heartbeat_at INTEGER;
