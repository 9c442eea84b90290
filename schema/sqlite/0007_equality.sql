-- slate's database, version 7: why two sides were found equal, and what travelled with the bytes.

-- equal_by (destination rows): 'copied' when slate wrote the object, else the rule that found
-- the two sides equal without a copy: 'manifest' (unchanged since slate synced it, its
-- last-modified moved), 'digest' (an MD5 both list), 'mtime' (size and modification time,
-- rclone's default), 'content' (both read and hashed, --checksum) or 'size' (--size-only).
-- NULL for rows older than this version.
ALTER TABLE objects ADD COLUMN equal_by TEXT;

-- meta: a fingerprint (xxh3, hex) of the object's Content-* headers, user metadata and
-- modification time when slate last copied or compared it; a source whose fingerprint moved
-- while its bytes did not has a metadata-only change.
ALTER TABLE objects ADD COLUMN meta TEXT;
