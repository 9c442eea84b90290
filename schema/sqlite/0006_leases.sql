-- slate's database, version 6: leases, so that one reconcile of a pair runs at a time.

-- A lease names what it guards (`pair:ID`, later `pair:ID:partition`), who holds it and until
-- when. The holder renews it while it works (every third of the time to live) and deletes it
-- when done; a holder that died loses it at `expires_at`, or at once when it ran on this host
-- and its process is gone. Taken by `sync --once`, the daemon's backfill and drift check, and
-- jobs. With SQLite every holder is on one host; the host is recorded for a shared server
-- database, where workers of several hosts would take the same lease.
CREATE TABLE leases (
    name        TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,             -- unique per holder: PID:START:RANDOM
    host        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    purpose     TEXT NOT NULL,             -- what the holder does (sync --once, drift check, job 12)
    acquired_at INTEGER NOT NULL,          -- unix milliseconds
    expires_at  INTEGER NOT NULL           -- unix milliseconds
) WITHOUT ROWID;
