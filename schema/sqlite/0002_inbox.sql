-- slate's database, version 2: the event inbox of the daemon.

-- One row per (pair, key) with work pending: events for the same key coalesce into it (the
-- reconciler reads the source's current state anyway, rule 1 of docs/ARCHITECTURE.md). A row is written before
-- the cloud message is acknowledged (rule 2) and removed once the key is reconciled.
CREATE TABLE inbox (
    pair_id     INTEGER NOT NULL REFERENCES pairs (id),
    key         TEXT NOT NULL,
    kind        INTEGER NOT NULL,          -- last event: 0 upsert, 1 delete (informational)
    token       TEXT,                      -- newest ordering token seen for the key
    events      INTEGER NOT NULL,          -- events coalesced into this row
    first_seen  INTEGER NOT NULL,          -- unix milliseconds
    last_seen   INTEGER NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    not_before  INTEGER NOT NULL DEFAULT 0, -- unix milliseconds: retry backoff
    PRIMARY KEY (pair_id, key)
) WITHOUT ROWID;

-- Messages that could not be parsed: kept with the raw text and the reason, then acknowledged.
CREATE TABLE dead_letters (
    id          INTEGER PRIMARY KEY,
    pair_id     INTEGER,
    source      TEXT NOT NULL,
    raw         BLOB NOT NULL,
    reason      TEXT NOT NULL,
    received_at INTEGER NOT NULL
);
