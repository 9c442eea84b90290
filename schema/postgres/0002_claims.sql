-- PostgreSQL's equivalent of schema/sqlite/0009_claims.sql: a pending key is claimed by one
-- worker at a time until its claim expires; who applied which key and when.
ALTER TABLE inbox ADD COLUMN claimed_by TEXT COLLATE "C";
ALTER TABLE inbox ADD COLUMN claimed_host TEXT COLLATE "C";
ALTER TABLE inbox ADD COLUMN claim_until BIGINT NOT NULL DEFAULT 0;

CREATE INDEX inbox_by_claimer ON inbox (claimed_by) WHERE claimed_by IS NOT NULL;

CREATE TABLE applies (
    pair_id     BIGINT NOT NULL,
    key         TEXT COLLATE "C" NOT NULL,
    worker      TEXT COLLATE "C" NOT NULL,
    host        TEXT COLLATE "C" NOT NULL,
    started_at  BIGINT NOT NULL,
    finished_at BIGINT NOT NULL,
    outcome     TEXT COLLATE "C" NOT NULL
);
CREATE INDEX applies_by_key ON applies (pair_id, key, started_at);
CREATE INDEX applies_by_time ON applies (finished_at);

ALTER TABLE jobs ADD COLUMN host TEXT COLLATE "C";
ALTER TABLE jobs ADD COLUMN heartbeat_at BIGINT;
