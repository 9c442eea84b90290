-- As schema/sqlite/0015_feed_cursors.sql: where a log-like event source was read to.
CREATE TABLE feed_cursors (
    feed       TEXT COLLATE "C" PRIMARY KEY,
    cursor     TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
