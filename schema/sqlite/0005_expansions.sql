-- slate's database, version 5: prefix events expanded in bounded, durable steps; the indexes
-- the daemon's hot queries seek with.

-- A prefix to reconcile as a whole (an Azure directory deleted or renamed, a folder that
-- appeared or vanished under a watched root, an inotify queue overflow). Stored in the same
-- transaction as the message's other events, before the message is acknowledged; then the
-- pair's expander lists the prefix at the source in pages and pushes one inbox row per key,
-- moving `cursor` forward in the same transaction as each page's rows, so that a crash
-- resumes after the last page stored and memory never holds more than one page.
CREATE TABLE expansions (
    pair_id     INTEGER NOT NULL REFERENCES pairs (id),
    prefix      TEXT NOT NULL,             -- relative to the pair's prefix; '' = everything, else ends with '/'
    phase       INTEGER NOT NULL DEFAULT 0, -- 0: listing the source; 1: keys the manifest recorded there
    cursor      TEXT NOT NULL DEFAULT '',   -- phase 0: the listing's next page token (a cloud
                                            -- store) or the last key pushed (a local folder);
                                            -- phase 1: the last key pushed
    generation  INTEGER NOT NULL DEFAULT 0, -- grows when a new event restarts the expansion: a
                                            -- step only moves the row it read (compare-and-set)
    created_at  INTEGER NOT NULL,           -- unix milliseconds
    not_before  INTEGER NOT NULL DEFAULT 0, -- unix milliseconds: a step that failed waits
    attempts    INTEGER NOT NULL DEFAULT 0,
    error       TEXT,                       -- why the last step failed
    PRIMARY KEY (pair_id, prefix)
) WITHOUT ROWID;

CREATE INDEX expansions_due ON expansions (pair_id, not_before, created_at);

-- The inbox's keys in the order they are taken (oldest first), so that a take reads only
-- what it takes, however long the backlog.
CREATE INDEX inbox_by_age ON inbox (pair_id, first_seen, key);

-- Dead letters by pair and age (health lines count them; old ones are pruned).
CREATE INDEX dead_letters_by_pair ON dead_letters (pair_id, received_at);
