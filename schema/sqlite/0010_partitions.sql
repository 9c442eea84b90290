-- slate's database, version 10: partitioned reconciles, so that workers sharing one database
-- split a pair's backfill or drift check between them.
--
-- A run is one reconcile of one pair, split into key ranges as its planner lists the source:
-- every few thousand keys it records a partition (after_key, through_key] and moves
-- `cut_after` on; `planned` is set when the listing ended. Workers take a pending partition
-- by taking the lease `pair:ID/run:RUN/part:IDX` (see 0006: one holder at a time, renewed,
-- free when its holder dies) and record it done. A planner that dies is followed by another
-- from `cut_after` (its lease is `pair:ID/run:RUN/plan`). The pair's own lease `pair:ID` and
-- the leases under it exclude each other: a whole-pair reconcile and a partitioned one never
-- run together.
CREATE TABLE part_runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    pair_id     INTEGER NOT NULL,
    purpose     TEXT NOT NULL,             -- daemon backfill, drift check, sync --once
    spec        TEXT NOT NULL,             -- the options every partition runs with
    started_at  INTEGER NOT NULL,          -- unix milliseconds
    cut_after   TEXT,                      -- the last partition's through_key (NULL: none yet)
    parts       INTEGER NOT NULL DEFAULT 0,
    planned     INTEGER NOT NULL DEFAULT 0,
    deletes     INTEGER NOT NULL DEFAULT 0, -- deletes partitions reserved (--max-delete N)
    finished_at INTEGER,
    failed      INTEGER NOT NULL DEFAULT 0  -- objects that failed, over all partitions
);
CREATE INDEX part_runs_by_pair ON part_runs (pair_id, finished_at);

CREATE TABLE parts (
    run_id      INTEGER NOT NULL,
    idx         INTEGER NOT NULL,
    after_key   TEXT,                      -- exclusive (NULL: from the first key)
    through_key TEXT,                      -- inclusive (NULL: to the last key)
    keys        INTEGER NOT NULL,          -- source keys in it when it was planned
    state       TEXT NOT NULL DEFAULT 'pending', -- pending | done | failed
    attempts    INTEGER NOT NULL DEFAULT 0, -- times taken (a worker killed with it counts)
    errors      INTEGER NOT NULL DEFAULT 0, -- takes that ended in an error (3: failed)
    retry_at    INTEGER NOT NULL DEFAULT 0, -- after an error, not taken again before
    taken_by    TEXT,                      -- the last worker that took it
    taken_host  TEXT,
    taken_at    INTEGER,
    done_by     TEXT,
    done_host   TEXT,
    done_at     INTEGER,
    copied      INTEGER NOT NULL DEFAULT 0,
    deleted     INTEGER NOT NULL DEFAULT 0,
    failed      INTEGER NOT NULL DEFAULT 0,
    reserved    INTEGER NOT NULL DEFAULT 0, -- deletes it reserved from the run's (its last take's)
    error       TEXT,
    PRIMARY KEY (run_id, idx)
);
