-- 0012: the daemon's delete brake (issue 23). Deletes a pair applies are counted in a sliding
-- window (shared by every worker of a database); past the pair's limit the brake engages and
-- later deletes are held in the inbox (held = 1, not_before = the largest integer: never due)
-- until an operator releases them (held = 2: due, and let past the brake) or drops them.
ALTER TABLE inbox ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
CREATE TABLE delete_brakes (
    pair_id      INTEGER PRIMARY KEY,
    engaged_at   INTEGER,                    -- unix ms; NULL: not engaged
    reason       TEXT,
    window_start INTEGER NOT NULL DEFAULT 0, -- unix ms: when the current window began
    window_base  INTEGER NOT NULL DEFAULT 0  -- source objects the manifest held then
);
CREATE TABLE brake_deletes (
    id      INTEGER PRIMARY KEY,
    pair_id INTEGER NOT NULL,
    at      INTEGER NOT NULL                 -- unix ms of an admitted delete
);
CREATE INDEX brake_deletes_by_pair ON brake_deletes (pair_id, at);
