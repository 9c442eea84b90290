-- slate's database, version 1: the manifest of what each pair's two sides hold.
-- Applied in order at start by src/state/manifest.rs; PRAGMA user_version records the last one applied.

-- A pair is a (source URL, destination URL) that slate keeps equal.
CREATE TABLE pairs (
    id              INTEGER PRIMARY KEY,
    src             TEXT NOT NULL,
    dst             TEXT NOT NULL,
    created_at      INTEGER NOT NULL,      -- unix seconds
    -- set when a full reconcile (sync --once) finished: from then on the manifest can vouch
    -- for the destination and --once need not list it again
    last_sync_at    INTEGER,
    last_sync_note  TEXT,
    UNIQUE (src, dst)
);

-- What slate last saw or wrote, per pair, side (0 = source, 1 = destination) and key (relative
-- to the pair's prefix). For a destination row written by slate, etag is what the write
-- returned; for a source row, the etag slate copied from.
CREATE TABLE objects (
    pair_id         INTEGER NOT NULL REFERENCES pairs (id),
    side            INTEGER NOT NULL CHECK (side IN (0, 1)),
    key             TEXT NOT NULL,
    size            INTEGER NOT NULL,
    etag            TEXT,
    last_modified   INTEGER,               -- unix milliseconds
    hash            TEXT,                  -- xxh3-128 content hash (hex), when bytes passed
    version         TEXT,                  -- version id / generation
    sequencer       TEXT,                  -- ordering token of the last event (daemon)
    synced_at       INTEGER NOT NULL,      -- unix seconds
    PRIMARY KEY (pair_id, side, key)
) WITHOUT ROWID;
