-- PostgreSQL's equivalent of schema/sqlite/0014_canaries_freshness.sql: canary events.
CREATE TABLE canary_events (
    pair_id BIGINT NOT NULL,
    key     TEXT COLLATE "C" NOT NULL,
    kind    BIGINT NOT NULL,
    at      BIGINT NOT NULL,
    PRIMARY KEY (pair_id, key, kind)
);

-- As schema/sqlite/0014_canaries_freshness.sql: the provider's time of the newest change of a pending key.
ALTER TABLE inbox ADD COLUMN event_at BIGINT;
