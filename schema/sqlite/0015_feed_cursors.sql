-- 0015: where a log-like event source was read to (issue 26: Azure's change feed). The
-- cursor is written in the transaction that stores the inbox rows of the records before it,
-- so a daemon killed at any moment resumes where its stored events end: nothing lost, and
-- nothing applied twice that a re-read could not repeat harmlessly.
CREATE TABLE feed_cursors (
    feed       TEXT PRIMARY KEY,       -- changefeed://ACCOUNT
    cursor     TEXT NOT NULL,          -- the source's own position (JSON)
    updated_at INTEGER NOT NULL        -- unix ms
);
