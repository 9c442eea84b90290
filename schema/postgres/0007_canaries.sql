-- PostgreSQL's equivalent of schema/sqlite/0014_canaries.sql: canary events.
CREATE TABLE canary_events (
    pair_id BIGINT NOT NULL,
    key     TEXT COLLATE "C" NOT NULL,
    kind    BIGINT NOT NULL,
    at      BIGINT NOT NULL,
    PRIMARY KEY (pair_id, key, kind)
);
