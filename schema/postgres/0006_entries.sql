-- PostgreSQL's equivalent of schema/sqlite/0013_entries.sql: the manifest, one row per key.
CREATE TABLE entries (
    pair_id    BIGINT NOT NULL REFERENCES pairs (id),
    key        TEXT COLLATE "C" NOT NULL,
    s_size     BIGINT,
    s_md5      BYTEA,
    s_etag     TEXT COLLATE "C",
    s_mtime    BIGINT,
    s_meta     BYTEA,
    s_seq      TEXT COLLATE "C",
    d_size     BIGINT,
    d_md5      BYTEA,
    d_etag     TEXT COLLATE "C",
    d_mtime    BIGINT,
    hash       BYTEA,
    equal_by   SMALLINT,
    PRIMARY KEY (pair_id, key)
);

CREATE TEMP VIEW v6_objects AS
SELECT o.*,
    CASE WHEN etag ~ '^"[0-9a-f]{32}"$' THEN decode(substr(etag, 2, 32), 'hex') END AS md5
FROM objects o;

INSERT INTO entries (pair_id, key, s_size, s_md5, s_etag, s_mtime, s_meta, s_seq,
                     d_size, d_md5, d_etag, d_mtime, hash, equal_by)
SELECT k.pair_id, k.key,
    s.size, s.md5, CASE WHEN s.md5 IS NULL THEN s.etag END, s.last_modified,
    CASE WHEN s.meta ~ '^[0-9a-f]{16}$' THEN decode(s.meta, 'hex') END,
    s.sequencer,
    d.size, CASE WHEN d.md5 = s.md5 THEN ''::bytea ELSE d.md5 END,
    CASE WHEN d.md5 IS NULL THEN d.etag END, d.last_modified,
    CASE WHEN COALESCE(d.hash, s.hash) ~ '^[0-9a-f]{32}$'
         THEN decode(COALESCE(d.hash, s.hash), 'hex') END,
    CASE COALESCE(d.equal_by, '') WHEN 'copied' THEN 1 WHEN 'manifest' THEN 2
        WHEN 'digest' THEN 3 WHEN 'mtime' THEN 4 WHEN 'content' THEN 5 WHEN 'size' THEN 6 END
FROM (SELECT DISTINCT pair_id, key FROM objects) k
LEFT JOIN v6_objects s ON s.pair_id = k.pair_id AND s.side = 0 AND s.key = k.key
LEFT JOIN v6_objects d ON d.pair_id = k.pair_id AND d.side = 1 AND d.key = k.key;

DROP VIEW v6_objects;
DROP TABLE objects;
