-- 0011: dead letters as an operator sees them (issue 23). A letter of no pair is counted under
-- the queue (or webhook) it came from, never under every pair; a Storage Queue message keeps
-- the decoded event beside the raw text; the reason holds at most MAX_REASONS reasons of one
-- message (one row per message, the raw text stored once).
ALTER TABLE dead_letters ADD COLUMN queue TEXT NOT NULL DEFAULT '';
ALTER TABLE dead_letters ADD COLUMN decoded BLOB;
-- the letters of nobody, by queue; and the pruning by age
CREATE INDEX dead_letters_by_queue ON dead_letters (queue, received_at) WHERE pair_id IS NULL;
CREATE INDEX dead_letters_by_time ON dead_letters (received_at);
