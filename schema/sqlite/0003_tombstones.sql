-- slate's database, version 3: tombstones, so that a late event older than a delete already
-- applied is skipped without asking the source (docs/ARCHITECTURE.md, rule 1). The source is
-- still the truth: a tombstone only saves work, it never decides on its own.

CREATE TABLE tombstones (
    pair_id     INTEGER NOT NULL REFERENCES pairs (id),
    key         TEXT NOT NULL,
    sequencer   TEXT NOT NULL,             -- ordering token of the delete (normalised text)
    deleted_at  INTEGER NOT NULL,          -- unix seconds; pruned after 15 days (> SQS's 14)
    PRIMARY KEY (pair_id, key)
) WITHOUT ROWID;
