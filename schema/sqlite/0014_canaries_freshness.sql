-- 0014: canary events (issue 26). When the daemon stores an event of a canary key (a key
-- under `.slate-canary/` of the pair's prefix, see src/core/canary.rs), the first event of
-- each kind is noted here in the same transaction, so that `slate check` (another process)
-- sees the event arrive and the daemon's own canary measures its latency. The writer of a
-- canary removes its rows when done.
CREATE TABLE canary_events (
    pair_id INTEGER NOT NULL,
    key     TEXT NOT NULL,
    kind    INTEGER NOT NULL,          -- 0 upsert, 1 delete
    at      INTEGER NOT NULL,          -- unix ms the event was stored
    PRIMARY KEY (pair_id, key, kind)
) WITHOUT ROWID;

-- The freshness objective (issue 26): the provider's time of the newest change the events of
-- a pending key named (unix ms; NULL when the events carry none, as inotify's), so that the
-- daemon measures source write → replica besides event → replica.
ALTER TABLE inbox ADD COLUMN event_at INTEGER;
