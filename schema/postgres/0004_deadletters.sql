-- PostgreSQL's equivalent of schema/sqlite/0011_deadletters.sql: dead letters by queue,
-- the decoded text of a Storage Queue message.
ALTER TABLE dead_letters ADD COLUMN queue TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE dead_letters ADD COLUMN decoded BYTEA;
CREATE INDEX dead_letters_by_queue ON dead_letters (queue, received_at) WHERE pair_id IS NULL;
CREATE INDEX dead_letters_by_time ON dead_letters (received_at);
