//! `--backup-dir` with rclone's meaning: what a delete or an overwrite would remove at the
//! destination is first moved (a local folder: renamed; a bucket: copied server-side) to the
//! backup location, under its key with the time appended (`KEY.2026-12-03T181500.123Z`), so
//! that a mistake at the source (a folder emptied, a file overwritten) can be undone at the
//! destination. The backup location lives on the destination's store (a local folder for a
//! local destination, a prefix of the destination's bucket for a cloud one) and outside both
//! the pair's source and destination. When the backup fails, the delete or overwrite does
//! not happen (the key fails and is retried).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use object_store::ObjectStoreExt;

use crate::copy::transfer::{Ctx, End};
use crate::core::error::{Result, SlateError};
use crate::core::location::{Location, Scheme};
use crate::stores::side::{one_line, store_path, Side};

/// Where a pair's backups go.
#[derive(Debug, Clone)]
pub struct Backup {
    pub loc: Location,
}

/// Whether `inner` lies at or under `outer` (same store, same bucket, prefix-wise).
fn under(inner: &Location, outer: &Location) -> bool {
    if inner.scheme != outer.scheme || inner.bucket != outer.bucket {
        return false;
    }
    let (i, o) = (
        inner.prefix.trim_end_matches('/'),
        outer.prefix.trim_end_matches('/'),
    );
    o.is_empty() || i == o || i.starts_with(&format!("{o}/"))
}

/// Distinguishes two backups of one key within one millisecond.
static SEQ: AtomicU64 = AtomicU64::new(0);

impl Backup {
    /// Checks `backup` against the pair: on the destination's store, outside the source and
    /// the destination (a backup inside the destination would be replicated over, or deleted
    /// as an extra). One line naming the culprit otherwise.
    pub fn new(backup: &Location, src: &Location, dst: &Location) -> Result<Backup> {
        let bad = |why: String| SlateError::BadOption {
            option: "--backup-dir".into(),
            why,
        };
        let same_store = match dst.scheme {
            Scheme::Local => backup.scheme == Scheme::Local,
            _ => backup.same_store(dst),
        };
        if !same_store {
            return Err(bad(format!(
                "{backup} is not on the destination's store ({dst}): a backup is moved there, \
                 not copied across stores"
            )));
        }
        if under(backup, dst) || under(dst, backup) {
            return Err(bad(format!(
                "{backup} overlaps the destination {dst}: it must lie outside it"
            )));
        }
        if under(backup, src) || under(src, backup) {
            return Err(bad(format!(
                "{backup} overlaps the source {src}: it must lie outside it"
            )));
        }
        Ok(Backup {
            loc: backup.clone(),
        })
    }

    /// The backup's key of `key`: the key, a dot and the time (UTC, milliseconds); after the
    /// first backup of the process a sequence number follows (`…Z-7`), so that two backups
    /// of one key within one millisecond never take one name.
    pub fn name_for(key: &str, now: std::time::SystemTime) -> String {
        let ms = now
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let t = crate::core::units::rfc3339(ms);
        // 2026-12-03T18:15:00.123Z → 2026-12-03T181500.123Z (no ':' in file names)
        let stamp: String = t.chars().filter(|c| *c != ':').collect();
        let n = SEQ.fetch_add(1, Relaxed);
        if n == 0 {
            format!("{key}.{stamp}")
        } else {
            format!("{key}.{stamp}-{n}")
        }
    }

    /// Moves what the destination holds at `key` to the backup location; false when it holds
    /// nothing there.
    pub async fn take(&self, ctx: &Ctx, dst_loc: &Location, key: &str) -> Result<bool> {
        let name = Backup::name_for(key, std::time::SystemTime::now());
        let err = |detail: String| SlateError::Object {
            key: key.to_string(),
            detail,
        };
        match &ctx.dst {
            Side::Cloud { store, .. } => {
                let full = dst_loc.key_for(key);
                let from = store_path(&full)?;
                let to = store_path(&self.loc.key_for(&name))?;
                let retry = ctx.retry(End::Dst);
                // S3's CopyObject takes at most 5 GiB: a larger object is streamed through
                // slate into a multipart upload instead (else its delete could never happen)
                let streamed = if dst_loc.scheme == Scheme::S3 {
                    match retry.request(&full, |_| true, |_| store.head(&from)).await {
                        Ok(meta) => meta.size > copy_limit(),
                        Err(object_store::Error::NotFound { .. }) => return Ok(false),
                        Err(e) => {
                            return Err(err(format!("backing up: {}", one_line(&e))));
                        }
                    }
                } else {
                    false
                };
                let copied = if streamed {
                    stream_copy(store, &from, &to).await
                } else {
                    retry
                        .request(&full, |_| true, |_| store.copy(&from, &to))
                        .await
                };
                match copied {
                    Ok(()) => Ok(true),
                    Err(object_store::Error::NotFound { .. }) => Ok(false),
                    Err(e) => Err(err(format!("backing up to {}: {}", self.loc, one_line(&e)))),
                }
            }
            Side::Local { .. } => {
                let (root, to_root) = (ctx.dst_root.clone(), self.loc.local_path());
                let k = key.to_string();
                crate::state::blocking(move || {
                    crate::stores::local::move_out(&root, &k, &to_root, &name)
                })
                .await
            }
        }
    }
}

/// The largest object S3 copies server-side in one CopyObject (5 GiB); the tests lower it
/// (`SLATE_TEST_COPY_LIMIT`, test builds only) to take the streamed path with small objects.
fn copy_limit() -> u64 {
    #[cfg(feature = "faults")]
    if let Some(n) = std::env::var("SLATE_TEST_COPY_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    5 * 1024 * 1024 * 1024
}

/// Copies `from` to `to` through this process: a GET streamed into a multipart upload (parts
/// of 16 MiB), the content headers and user metadata carried over. The upload is aborted
/// when anything fails, so no partial object is left at `to`.
async fn stream_copy(
    store: &std::sync::Arc<dyn object_store::ObjectStore>,
    from: &object_store::path::Path,
    to: &object_store::path::Path,
) -> object_store::Result<()> {
    use futures::StreamExt;
    let got = store.get(from).await?;
    let opts = object_store::PutMultipartOptions {
        attributes: got.attributes.clone(),
        ..Default::default()
    };
    let upload = store.put_multipart_opts(to, opts).await?;
    let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, 16 * 1024 * 1024);
    let mut body = got.into_stream();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(b) => {
                writer.wait_for_capacity(4).await?;
                writer.write(&b);
            }
            Err(e) => {
                let _ = writer.abort().await;
                return Err(e);
            }
        }
    }
    writer.finish().await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(s: &str) -> Location {
        Location::parse(s).unwrap()
    }

    #[test]
    fn a_backup_lies_on_the_destinations_store_outside_both_sides() {
        // (backup, src, dst, ok)
        let cases = [
            ("s3://b/trash", "az://c/data", "s3://b/data", true),
            ("s3://b/data/trash", "az://c/data", "s3://b/data", false),
            ("s3://b/da", "az://c/data", "s3://b/data", true), // a sibling, not a parent
            ("s3://b", "az://c/data", "s3://b/data", false),   // the whole bucket holds dst
            ("s3://other/trash", "az://c/data", "s3://b/data", false),
            ("gs://b/trash", "az://c/data", "s3://b/data", false),
            ("/srv/trash", "/srv/src", "/srv/dst", true),
            ("/srv/dst/trash", "/srv/src", "/srv/dst", false),
            ("/srv/src/trash", "/srv/src", "/srv/dst", false),
            ("s3://b/trash", "/srv/src", "/srv/dst", false),
        ];
        for (backup, src, dst, ok) in cases {
            assert_eq!(
                Backup::new(&l(backup), &l(src), &l(dst)).is_ok(),
                ok,
                "{backup} for {src} -> {dst}"
            );
        }
    }

    #[test]
    fn backup_names_carry_the_time_and_never_collide() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_796_321_700_123);
        let a = Backup::name_for("d/f.bin", t);
        let b = Backup::name_for("d/f.bin", t);
        assert!(a.starts_with("d/f.bin.20"), "{a}");
        assert!(!a.contains(':'), "{a}");
        assert_ne!(a, b);
    }
}
