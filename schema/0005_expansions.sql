-- slate's database, version 5: prefix events expanded in bounded, durable steps.

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
    cursor      TEXT NOT NULL DEFAULT '',   -- last key pushed in the current phase
    created_at  INTEGER NOT NULL,           -- unix milliseconds
    PRIMARY KEY (pair_id, prefix)
) WITHOUT ROWID;
