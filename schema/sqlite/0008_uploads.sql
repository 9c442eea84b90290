-- slate's database, version 8: uploads under way, so that a copy cut short (killed, stopped,
-- cancelled) continues from its last whole chunk, and no upload slate started is left behind.

-- One row per object being written: a multipart upload (S3, GCS), the uncommitted blocks of a
-- blob (Azure: `upload_id` is '', its blocks have no upload), or a local temporary file
-- (`temp`). The row goes when the object is complete or the upload is aborted. A row whose
-- owner no longer runs is adopted by the next copy to the same destination: resumed when the
-- source is unchanged (`src_token`), aborted otherwise, and by `slate cleanup`.
CREATE TABLE uploads (
    id          INTEGER PRIMARY KEY,
    dst         TEXT NOT NULL,             -- s3://BUCKET, az://CONTAINER, gs://BUCKET, or a local root folder
    key         TEXT NOT NULL,             -- full key, or the path under the local root
    upload_id   TEXT,                      -- the store's upload id; NULL for a local file
    temp        TEXT,                      -- local: the temporary file being written
    src         TEXT NOT NULL,             -- the source key or path
    src_token   TEXT,                      -- the source's ETag (cloud) or size and mtime (local)
    meta        TEXT,                      -- what the upload began with: a fingerprint of the
                                           -- metadata, tags and placement (S3 and GCS take them
                                           -- at the start); a resume needs the same
    size        INTEGER NOT NULL,
    chunk_size  INTEGER NOT NULL,          -- the chunk size the parts were cut with
    owner       TEXT NOT NULL,             -- PID:START of the process writing it
    host        TEXT NOT NULL,
    started_at  INTEGER NOT NULL           -- unix milliseconds
);
CREATE INDEX uploads_by_key ON uploads (dst, key);

-- The chunks written so far: chunk `part` (from 0) of the upload is at the store (its part
-- ETag or block id in `etag`) or in the temporary file. `digests` holds the xxh3-128 of each
-- 1 MiB block of the chunk (16 bytes each, big-endian), from which the content hash of the
-- whole object is made without reading the chunk again.
CREATE TABLE upload_parts (
    upload      INTEGER NOT NULL REFERENCES uploads (id) ON DELETE CASCADE,
    part        INTEGER NOT NULL,
    etag        TEXT,
    digests     BLOB NOT NULL,
    PRIMARY KEY (upload, part)
) WITHOUT ROWID;
