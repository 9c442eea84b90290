-- 0013: the manifest, one row per key (issue 24). Version 1 kept two rows per key (one per
-- side), digests and fingerprints as hex text and the key twice; at millions of objects that
-- was ~250 bytes per object before the key. Now both sides' states share one row:
--   s_* the source, d_* the destination; a side is present when its size is not NULL.
--   *_md5: an ETag of the form "<32 lowercase hex>" (S3's MD5 ETag, quotes included) as its
--     16 bytes; any other ETag stays text in *_etag (Azure's 0x…, multipart -N, GCS's).
--     A destination MD5 equal to the source's is an empty blob: "the source's".
--   s_meta: the metadata fingerprint (xxh3-64) as 8 bytes; hash: the content hash (xxh3-128)
--     of the bytes slate last copied or compared, as 16 bytes.
--   s_seq: the ordering token of the last event applied (normalised text, compared as text).
--   equal_by: why the sides were found equal: 1 copied, 2 manifest, 3 digest, 4 mtime,
--     5 content, 6 size.
-- Not kept: the destination's metadata fingerprint, the unused `version` column, and
-- `synced_at` (written, never read).
CREATE TABLE entries (
    pair_id    INTEGER NOT NULL REFERENCES pairs (id),
    key        TEXT NOT NULL,
    s_size     INTEGER,
    s_md5      BLOB,
    s_etag     TEXT,
    s_mtime    INTEGER,                 -- unix milliseconds
    s_meta     BLOB,
    s_seq      TEXT,
    d_size     INTEGER,
    d_md5      BLOB,
    d_etag     TEXT,
    d_mtime    INTEGER,
    hash       BLOB,
    equal_by   INTEGER,
    PRIMARY KEY (pair_id, key)
) WITHOUT ROWID;

-- an MD5 ETag's 16 bytes, or NULL (then the text is kept)
CREATE TEMP VIEW v13_objects AS
SELECT o.*,
    CASE WHEN length(etag) = 34 AND substr(etag, 1, 1) = '"' AND substr(etag, 34, 1) = '"'
          AND substr(etag, 2, 32) = lower(substr(etag, 2, 32))
         THEN unhex(substr(etag, 2, 32)) END AS md5
FROM objects o;

INSERT INTO entries (pair_id, key, s_size, s_md5, s_etag, s_mtime, s_meta, s_seq,
                     d_size, d_md5, d_etag, d_mtime, hash, equal_by)
SELECT k.pair_id, k.key,
    s.size, s.md5, CASE WHEN s.md5 IS NULL THEN s.etag END, s.last_modified,
    CASE WHEN length(s.meta) = 16 AND s.meta = lower(s.meta) THEN unhex(s.meta) END,
    s.sequencer,
    d.size, CASE WHEN d.md5 = s.md5 THEN x'' ELSE d.md5 END,
    CASE WHEN d.md5 IS NULL THEN d.etag END, d.last_modified,
    CASE WHEN length(COALESCE(d.hash, s.hash)) = 32 THEN unhex(COALESCE(d.hash, s.hash)) END,
    CASE COALESCE(d.equal_by, '') WHEN 'copied' THEN 1 WHEN 'manifest' THEN 2
        WHEN 'digest' THEN 3 WHEN 'mtime' THEN 4 WHEN 'content' THEN 5 WHEN 'size' THEN 6 END
FROM (SELECT DISTINCT pair_id, key FROM objects) k
LEFT JOIN v13_objects s ON s.pair_id = k.pair_id AND s.side = 0 AND s.key = k.key
LEFT JOIN v13_objects d ON d.pair_id = k.pair_id AND d.side = 1 AND d.key = k.key;

DROP VIEW v13_objects;
DROP TABLE objects;
