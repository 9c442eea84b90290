//! Uploads under way (schema 0008): which multipart upload, Azure blocks or local temporary
//! file holds the chunks written so far of an object, so that a copy cut short continues from
//! its last whole chunk, and so that no upload slate started is left behind by a process that
//! died. A row belongs to the process that writes it (`owner`, `PID:START`); one whose owner
//! no longer runs on this host is *abandoned*, and the next copy to the same destination
//! adopts it ([`Uploads::adopt`]) to resume or abort it.

use super::db::{params, DbResult, OptionalExtension, Row};

use super::manifest::Manifest;
use super::owner::owner_alive;
use crate::core::error::Result;

/// One upload under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub id: i64,
    /// The destination store (`s3://BUCKET`, …) or local root folder.
    pub dst: String,
    /// The object's full key, or its path under the local root.
    pub key: String,
    /// The store's multipart upload id ('' for Azure); None for a local file.
    pub upload_id: Option<String>,
    /// Local destinations: the temporary file.
    pub temp: Option<String>,
    pub src: String,
    /// The source's ETag (cloud) or size and mtime (local) when the upload began.
    pub src_token: Option<String>,
    /// What the upload began with (metadata, tags, placement), for uploads that take them at
    /// the start; None where nothing is fixed then (local files, Azure).
    pub meta: Option<String>,
    pub size: u64,
    pub chunk_size: u64,
    pub owner: String,
    pub host: String,
    pub started_at: i64,
}

/// A chunk written: its index, the store's part id (None for a local file) and the digests of
/// its blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub part: u32,
    pub etag: Option<String>,
    pub digests: Vec<u128>,
}

/// The digests of a chunk's blocks as stored: 16 bytes each, big-endian.
pub fn encode_digests(d: &[u128]) -> Vec<u8> {
    d.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// The digests stored by [`encode_digests`]; None when the blob is not a whole number of them.
pub fn decode_digests(b: &[u8]) -> Option<Vec<u128>> {
    if b.len() % 16 != 0 {
        return None;
    }
    Some(
        b.chunks_exact(16)
            .map(|c| {
                let mut a = [0u8; 16];
                a.copy_from_slice(c);
                u128::from_be_bytes(a)
            })
            .collect(),
    )
}

const COLUMNS: &str = "id, dst, key, upload_id, temp, src, src_token, size, chunk_size, owner, \
                       host, started_at, meta";

fn upload_row(r: &Row) -> DbResult<Upload> {
    Ok(Upload {
        id: r.get(0)?,
        dst: r.get(1)?,
        key: r.get(2)?,
        upload_id: r.get(3)?,
        temp: r.get(4)?,
        src: r.get(5)?,
        src_token: r.get(6)?,
        size: r.get::<_, i64>(7)?.max(0) as u64,
        chunk_size: r.get::<_, i64>(8)?.max(0) as u64,
        owner: r.get(9)?,
        host: r.get(10)?,
        started_at: r.get(11)?,
        meta: r.get(12)?,
    })
}

/// The upload table of one database.
pub struct Uploads<'a> {
    m: &'a Manifest,
}

impl<'a> Uploads<'a> {
    pub fn new(m: &'a Manifest) -> Self {
        Uploads { m }
    }

    /// Records an upload that began (its `id` is ignored); returns its id.
    pub fn begin(&self, u: &Upload) -> Result<i64> {
        self.m.with(|c| {
            c.query_row(
                "INSERT INTO uploads (dst, key, upload_id, temp, src, src_token, size, \
                 chunk_size, owner, host, started_at, meta)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) RETURNING id",
                params![
                    u.dst,
                    u.key,
                    u.upload_id,
                    u.temp,
                    u.src,
                    u.src_token,
                    u.size as i64,
                    u.chunk_size as i64,
                    u.owner,
                    u.host,
                    u.started_at,
                    u.meta
                ],
                |r| r.get(0),
            )
        })
    }

    /// Records that chunk `part` of upload `id` is written.
    pub fn part_done(
        &self,
        id: i64,
        part: u32,
        etag: Option<&str>,
        digests: &[u128],
    ) -> Result<()> {
        self.m.with(|c| {
            c.execute(
                "INSERT INTO upload_parts (upload, part, etag, digests) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (upload, part) DO UPDATE SET etag = excluded.etag,
                    digests = excluded.digests",
                params![id, part as i64, etag, encode_digests(digests)],
            )
            .map(|_| ())
        })
    }

    /// The chunks of upload `id` recorded so far, by index. A row whose digests do not decode
    /// is left out (the chunk is written again).
    pub fn parts(&self, id: i64) -> Result<Vec<Part>> {
        self.m.with(|c| {
            let rows = c.query_map(
                "SELECT part, etag, digests FROM upload_parts WHERE upload = ?1 ORDER BY part",
                params![id],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, Vec<u8>>(2)?,
                    ))
                },
            )?;
            let mut out = Vec::new();
            for (part, etag, blob) in rows {
                if let (Ok(part), Some(digests)) = (u32::try_from(part), decode_digests(&blob)) {
                    out.push(Part {
                        part,
                        etag,
                        digests,
                    });
                }
            }
            Ok(out)
        })
    }

    /// Forgets upload `id` (complete, or aborted) and its chunks.
    pub fn forget(&self, id: i64) -> Result<()> {
        self.m.with(|c| {
            c.execute("DELETE FROM upload_parts WHERE upload = ?1", params![id])?;
            c.execute("DELETE FROM uploads WHERE id = ?1", params![id])
                .map(|_| ())
        })
    }

    /// One upload by id.
    pub fn get(&self, id: i64) -> Result<Option<Upload>> {
        self.m.with(|c| {
            c.query_row(
                &format!("SELECT {COLUMNS} FROM uploads WHERE id = ?1"),
                params![id],
                upload_row,
            )
            .optional()
        })
    }

    /// All uploads recorded for `dst` (every destination when None), oldest first.
    pub fn list(&self, dst: Option<&str>) -> Result<Vec<Upload>> {
        self.m.with(|c| {
            c.query_map(
                &format!("SELECT {COLUMNS} FROM uploads WHERE CAST(?1 AS TEXT) IS NULL OR dst = ?1 ORDER BY id"),
                params![dst],
                upload_row,
            )
        })
    }

    /// Takes over, for `owner`, the abandoned uploads of `dst` whose key is `key_prefix` or
    /// under it as a folder (every key when it is empty; every destination when `dst` is None): those whose owner ran on this
    /// `host` and no longer runs, and this process's own that no copy of it holds now
    /// (`held` says which do: a job cancelled mid-object left its upload to its resume).
    /// Uploads of another live process, or of another host (whose process cannot be asked),
    /// stay with their owner. Returns what was taken.
    pub fn adopt(
        &self,
        dst: Option<&str>,
        key_prefix: &str,
        owner: &str,
        host: &str,
        held: &dyn Fn(i64) -> bool,
    ) -> Result<Vec<Upload>> {
        self.adopt_from(dst, key_prefix, owner, host, false, held)
    }

    /// [`Uploads::adopt`], and with `any_host` also the uploads of other hosts, whose
    /// processes the caller says no longer run (`slate cleanup --any-host`).
    pub fn adopt_from(
        &self,
        dst: Option<&str>,
        key_prefix: &str,
        owner: &str,
        host: &str,
        any_host: bool,
        held: &dyn Fn(i64) -> bool,
    ) -> Result<Vec<Upload>> {
        let key_prefix = key_prefix.trim_end_matches('/');
        let candidates = self.m.with(|c| {
            c.query_map(
                &format!(
                    "SELECT {COLUMNS} FROM uploads
                 WHERE (CAST(?1 AS TEXT) IS NULL OR dst = ?1)
                   AND (?2 = '' OR key = ?2 OR substr(key, 1, length(?2) + 1) = ?2 || '/')
                   AND (?4 OR host = ?3 OR host = ?5)
                 ORDER BY id"
                ),
                // ?5: the plain host name rows of an earlier slate hold
                params![
                    dst,
                    key_prefix,
                    host,
                    any_host,
                    super::owner::host_label(host)
                ],
                upload_row,
            )
        })?;
        let mut taken = Vec::new();
        for mut u in candidates {
            let free = if u.owner == owner {
                !held(u.id)
            } else if !super::owner::same_host(&u.host, host) {
                any_host
            } else {
                !owner_alive(&u.owner)
            };
            if !free {
                continue;
            }
            // only if no one else took it meanwhile
            let moved = self.m.with(|c| {
                c.execute(
                    "UPDATE uploads SET owner = ?3 WHERE id = ?1 AND owner = ?2",
                    params![u.id, u.owner, owner],
                )
            })?;
            if moved == 1 {
                u.owner = owner.to_string();
                taken.push(u);
            }
        }
        Ok(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::db::testing::conformance;
    use crate::state::db::Location;

    conformance!(
        parts_are_recorded_and_forgotten_with_their_upload,
        only_uploads_of_dead_processes_on_this_host_are_adopted
    );
    use crate::state::owner::owner_tag;

    fn upload(dst: &str, key: &str, owner: &str) -> Upload {
        Upload {
            id: 0,
            dst: dst.into(),
            key: key.into(),
            upload_id: Some("u-1".into()),
            temp: None,
            src: format!("src/{key}"),
            src_token: Some("\"etag\"".into()),
            meta: None,
            size: 100 << 20,
            chunk_size: 8 << 20,
            owner: owner.into(),
            host: "h1".into(),
            started_at: 1,
        }
    }

    #[test]
    fn digests_round_trip_and_refuse_torn_blobs() {
        let d = vec![
            0u128,
            1,
            u128::MAX,
            0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10,
        ];
        assert_eq!(decode_digests(&encode_digests(&d)), Some(d));
        assert_eq!(decode_digests(&[]), Some(vec![]));
        assert_eq!(decode_digests(&[0u8; 17]), None);
    }

    fn parts_are_recorded_and_forgotten_with_their_upload(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let u = Uploads::new(&m);
        let id = u.begin(&upload("s3://b", "k", "1:1")).unwrap();
        u.part_done(id, 2, Some("\"p2\""), &[7, 8]).unwrap();
        u.part_done(id, 0, Some("\"p0\""), &[5]).unwrap();
        // a chunk written again replaces its row
        u.part_done(id, 0, Some("\"p0b\""), &[6]).unwrap();
        let parts = u.parts(id).unwrap();
        assert_eq!(
            parts,
            vec![
                Part {
                    part: 0,
                    etag: Some("\"p0b\"".into()),
                    digests: vec![6]
                },
                Part {
                    part: 2,
                    etag: Some("\"p2\"".into()),
                    digests: vec![7, 8]
                },
            ]
        );
        assert_eq!(u.get(id).unwrap().map(|r| r.key), Some("k".to_string()));
        u.forget(id).unwrap();
        assert!(u.get(id).unwrap().is_none());
        assert!(u.parts(id).unwrap().is_empty());
    }

    fn only_uploads_of_dead_processes_on_this_host_are_adopted(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let u = Uploads::new(&m);
        let me = owner_tag(std::process::id()).unwrap();
        let (pid, _) = me.split_once(':').unwrap();
        let dead = format!("{pid}:1"); // our PID with another start time: not running
        let other = "me-too:9";
        let mut other_host = upload("s3://b", "data/x", &dead);
        other_host.host = "h2".into();
        let rows = [
            upload("s3://b", "data/a", &dead),     // adopted
            upload("s3://b", "data/b", &me),       // alive: kept
            upload("s3://b", "logs/c", &dead),     // outside the prefix
            upload("s3://b", "database/f", &dead), // "data" is not a folder of it
            upload("s3://other", "data/d", &dead), // another destination
            other_host,                            // another host: cannot be asked
            upload("s3://b", "data/e", other),     // not PID:START: not running, adopted
        ];
        for r in &rows {
            u.begin(r).unwrap();
        }
        let got = u
            .adopt(Some("s3://b"), "data/", "9:9", "h1", &|_| false)
            .unwrap();
        let keys: Vec<_> = got.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, vec!["data/a", "data/e"]);
        assert!(got.iter().all(|r| r.owner == "9:9"));
        let all = u.list(Some("s3://b")).unwrap();
        assert_eq!(all.len(), 6);
        // every destination; "9:9" does not run either, so its two are taken again; our own
        // row is taken when no copy holds it
        let again = u.adopt(None, "", &me, "h1", &|_| true).unwrap();
        let keys: Vec<_> = again.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            keys,
            vec!["data/a", "logs/c", "database/f", "data/d", "data/e"]
        );
        let b = all.iter().find(|r| r.key == "data/b").unwrap().id;
        let mine = u.adopt(None, "", &me, "h1", &|id| id != b).unwrap();
        let keys: Vec<_> = mine.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, vec!["data/b"]);
        // another host's, only when asked for
        assert!(u
            .adopt(None, "", "7:7", "h1", &|_| false)
            .unwrap()
            .iter()
            .all(|r| r.host == "h1"));
        let far = u
            .adopt_from(Some("s3://b"), "data/x", "8:8", "h1", true, &|_| false)
            .unwrap();
        assert_eq!(far.len(), 1);
        assert_eq!(far[0].host, "h2");
    }
}
