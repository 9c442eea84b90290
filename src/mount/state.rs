//! The mount's own state, a SQLite file in its cache folder (`state.db`), shared by the
//! mounts that use that folder (a column names each one's source):
//! - **pending:** files closed with `--write-back` and not uploaded yet: where their bytes
//!   are kept (`dirty/`), and as of when. A mount that is killed leaves them; the next
//!   mount of the same source uploads them first.
//! - **dropped:** event messages the mount could not read (it acknowledges them, as a
//!   daemon dead-letters them), with the reason and the text.
//! - **lost:** files closed with `--write-back` whose kept bytes were gone before their
//!   upload (their `dirty/` file removed by hand, or a disk lost): never uploaded.
//!
//! `slate mount-status` lists all three.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection};

/// A written file waiting for its upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub src: String,
    pub rel: String,
    pub file: PathBuf,
    pub size: u64,
    pub mtime: SystemTime,
    /// Raised at each new close of the same path: an upload clears only its own.
    pub gen: i64,
    /// When it was closed (seconds since the epoch).
    pub since: i64,
}

/// A file closed with `--write-back` whose kept bytes were gone before its upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    pub src: String,
    pub rel: String,
    /// Where its bytes were kept.
    pub file: PathBuf,
    pub size: u64,
    /// When it was closed, and when its bytes were found gone (seconds since the epoch).
    pub since: i64,
    pub at: i64,
}

/// A message the mount dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub src: String,
    pub at: i64,
    pub source: String,
    pub reason: String,
    pub text: String,
}

pub struct MountState {
    conn: Mutex<Connection>,
    path: PathBuf,
}

fn secs(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn nanos(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}

/// The next write-back generation of `src` (in the caller's transaction). It is never
/// given twice for a source, even after its record is gone: an upload of a record that was
/// forgotten and made anew must not clear the new one.
fn next_gen(c: &Connection, src: &str) -> rusqlite::Result<i64> {
    c.query_row(
        "INSERT INTO gens (src, last)
         VALUES (?1, (SELECT COALESCE(MAX(gen), 0) + 1 FROM pending WHERE src = ?1))
         ON CONFLICT (src) DO UPDATE SET last = MAX(last,
             (SELECT COALESCE(MAX(gen), 0) FROM pending WHERE src = ?1)) + 1
         RETURNING last",
        params![src],
        |r| r.get(0),
    )
}

impl MountState {
    /// Opens (or makes) `dir/state.db`.
    pub fn open(dir: &Path) -> Result<MountState, String> {
        let path = dir.join("state.db");
        let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
        let conn = Connection::open(&path).map_err(|e| fail(&e))?;
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(|e| fail(&e))?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS pending (
                 src TEXT NOT NULL, rel TEXT NOT NULL, file TEXT NOT NULL,
                 size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, gen INTEGER NOT NULL,
                 since INTEGER NOT NULL, PRIMARY KEY (src, rel));
             CREATE INDEX IF NOT EXISTS pending_gen ON pending (src, gen);
             CREATE TABLE IF NOT EXISTS gens (src TEXT PRIMARY KEY, last INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS dropped (
                 id INTEGER PRIMARY KEY, src TEXT NOT NULL, at INTEGER NOT NULL,
                 source TEXT NOT NULL, reason TEXT NOT NULL, text TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS lost (
                 id INTEGER PRIMARY KEY, src TEXT NOT NULL, rel TEXT NOT NULL,
                 file TEXT NOT NULL, size INTEGER NOT NULL, since INTEGER NOT NULL,
                 at INTEGER NOT NULL);",
        )
        .map_err(|e| fail(&e))?;
        Ok(MountState {
            conn: Mutex::new(conn),
            path,
        })
    }

    /// The folder the state is in (the cache folder).
    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// Whether `rel`'s record is still generation `gen` (no mount sharing the folder
    /// deleted it or took it over since).
    pub fn names(&self, src: &str, rel: &str, gen: i64) -> Result<bool, String> {
        use rusqlite::OptionalExtension;
        self.conn()
            .query_row(
                "SELECT 1 FROM pending WHERE src = ?1 AND rel = ?2 AND gen = ?3",
                params![src, rel, gen],
                |_| Ok(()),
            )
            .optional()
            .map(|r| r.is_some())
            .map_err(|e| self.fail(e))
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fail(&self, e: rusqlite::Error) -> String {
        format!("{}: {e}", self.path.display())
    }

    /// Records `rel` of `src` as closed and waiting, its bytes in `file`; returns its
    /// generation. A record of the same path is replaced (its file is the caller's to remove).
    pub fn record(
        &self,
        src: &str,
        rel: &str,
        file: &Path,
        size: u64,
        mtime: SystemTime,
    ) -> Result<i64, String> {
        let mut conn = self.conn();
        // one transaction (one fsync): the generation and the record land together
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.fail(e))?;
        let gen = next_gen(&tx, src).map_err(|e| self.fail(e))?;
        tx.execute(
            "INSERT OR REPLACE INTO pending (src, rel, file, size, mtime_ns, gen, since)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                src,
                rel,
                file.to_string_lossy(),
                size as i64,
                nanos(mtime),
                gen,
                secs(SystemTime::now())
            ],
        )
        .map_err(|e| self.fail(e))?;
        tx.commit().map_err(|e| self.fail(e))?;
        Ok(gen)
    }

    /// Takes over `rel`'s record from the mount that kept its bytes in `old`: it names
    /// `new` at a new generation, if it still names `old` (one transaction: of two mounts
    /// taking it over at once, one does). The new generation; None when it names another
    /// file now (taken over already, closed again, or gone).
    pub fn take_over(
        &self,
        src: &str,
        rel: &str,
        old: &Path,
        new: &Path,
    ) -> Result<Option<i64>, String> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.fail(e))?;
        // by name: the record may spell the cache folder otherwise (a container's mount
        // of the host's folder), and kept names are never given twice
        let named: Option<String> = {
            use rusqlite::OptionalExtension;
            tx.query_row(
                "SELECT file FROM pending WHERE src = ?1 AND rel = ?2",
                params![src, rel],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.fail(e))?
        };
        let Some(named) = named.filter(|f| Path::new(f).file_name() == old.file_name()) else {
            return Ok(None);
        };
        let gen = next_gen(&tx, src).map_err(|e| self.fail(e))?;
        let n = tx
            .execute(
                "UPDATE pending SET file = ?3, gen = ?4 WHERE src = ?1 AND rel = ?2 AND file = ?5",
                params![src, rel, new.to_string_lossy(), gen, named],
            )
            .map_err(|e| self.fail(e))?;
        if n != 1 {
            return Ok(None);
        }
        tx.commit().map_err(|e| self.fail(e))?;
        Ok(Some(gen))
    }

    /// Moves `rel`'s record to the lost files when it is still generation `gen` (a newer
    /// close, or another mount's take-over, makes a new one); whether it did. One
    /// transaction: a record is waiting or lost, never neither.
    pub fn lose(&self, src: &str, rel: &str, gen: i64) -> Result<bool, String> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.fail(e))?;
        let n = tx
            .execute(
                "INSERT INTO lost (src, rel, file, size, since, at)
                 SELECT src, rel, file, size, since, ?4 FROM pending
                 WHERE src = ?1 AND rel = ?2 AND gen = ?3",
                params![src, rel, gen, secs(SystemTime::now())],
            )
            .map_err(|e| self.fail(e))?;
        if n == 0 {
            return Ok(false);
        }
        tx.execute(
            "DELETE FROM pending WHERE src = ?1 AND rel = ?2 AND gen = ?3",
            params![src, rel, gen],
        )
        .map_err(|e| self.fail(e))?;
        tx.commit().map_err(|e| self.fail(e))?;
        Ok(true)
    }

    /// The lost files of `src` (every source's when None), oldest first.
    pub fn lost(&self, src: Option<&str>) -> Result<Vec<Lost>, String> {
        let conn = self.conn();
        let mut q = conn
            .prepare(
                "SELECT src, rel, file, size, since, at FROM lost
                 WHERE ?1 IS NULL OR src = ?1 ORDER BY id",
            )
            .map_err(|e| self.fail(e))?;
        let rows = q
            .query_map(params![src], |r| {
                Ok(Lost {
                    src: r.get(0)?,
                    rel: r.get(1)?,
                    file: PathBuf::from(r.get::<_, String>(2)?),
                    size: r.get::<_, i64>(3)?.max(0) as u64,
                    since: r.get(4)?,
                    at: r.get(5)?,
                })
            })
            .map_err(|e| self.fail(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.fail(e))
    }

    /// Clears `rel`'s record when it is still generation `gen`; whether it was.
    pub fn uploaded(&self, src: &str, rel: &str, gen: i64) -> Result<bool, String> {
        self.conn()
            .execute(
                "DELETE FROM pending WHERE src = ?1 AND rel = ?2 AND gen = ?3",
                params![src, rel, gen],
            )
            .map(|n| n > 0)
            .map_err(|e| self.fail(e))
    }

    /// Clears `rel`'s record whatever its generation (deleted through the mount).
    pub fn forget(&self, src: &str, rel: &str) -> Result<(), String> {
        self.conn()
            .execute(
                "DELETE FROM pending WHERE src = ?1 AND rel = ?2",
                params![src, rel],
            )
            .map(|_| ())
            .map_err(|e| self.fail(e))
    }

    /// The waiting files of `src` (every source's when None), oldest first.
    pub fn pending(&self, src: Option<&str>) -> Result<Vec<Pending>, String> {
        let conn = self.conn();
        let mut q = conn
            .prepare(
                "SELECT src, rel, file, size, mtime_ns, gen, since FROM pending
                 WHERE ?1 IS NULL OR src = ?1 ORDER BY since, rel",
            )
            .map_err(|e| self.fail(e))?;
        let rows = q
            .query_map(params![src], |r| {
                let mtime_ns: i64 = r.get(4)?;
                Ok(Pending {
                    src: r.get(0)?,
                    rel: r.get(1)?,
                    file: PathBuf::from(r.get::<_, String>(2)?),
                    size: r.get::<_, i64>(3)?.max(0) as u64,
                    mtime: UNIX_EPOCH + Duration::from_nanos(mtime_ns.max(0) as u64),
                    gen: r.get(5)?,
                    since: r.get(6)?,
                })
            })
            .map_err(|e| self.fail(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.fail(e))
    }

    /// Keeps a dropped message (its text cut to 64 KiB).
    pub fn dropped_message(
        &self,
        src: &str,
        source: &str,
        reason: &str,
        text: &[u8],
    ) -> Result<(), String> {
        let text = String::from_utf8_lossy(&text[..text.len().min(64 * 1024)]).to_string();
        self.conn()
            .execute(
                "INSERT INTO dropped (src, at, source, reason, text) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![src, secs(SystemTime::now()), source, reason, text],
            )
            .map(|_| ())
            .map_err(|e| self.fail(e))
    }

    /// The dropped messages of `src` (every source's when None), newest last.
    pub fn dropped(&self, src: Option<&str>) -> Result<Vec<Dropped>, String> {
        let conn = self.conn();
        let mut q = conn
            .prepare(
                "SELECT src, at, source, reason, text FROM dropped
                 WHERE ?1 IS NULL OR src = ?1 ORDER BY id",
            )
            .map_err(|e| self.fail(e))?;
        let rows = q
            .query_map(params![src], |r| {
                Ok(Dropped {
                    src: r.get(0)?,
                    at: r.get(1)?,
                    source: r.get(2)?,
                    reason: r.get(3)?,
                    text: r.get(4)?,
                })
            })
            .map_err(|e| self.fail(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.fail(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn of_two_mounts_taking_over_a_record_one_does_and_a_stale_forget_clears_nothing() {
        let d = tempfile::tempdir().unwrap();
        let s = MountState::open(d.path()).unwrap();
        let now = SystemTime::now();
        let dead = d.path().join("dirty/9-1-1");
        let g0 = s.record("s3://b", "a.txt", &dead, 3, now).unwrap();
        // two mounts read the record, then both take it over
        let (m1, m2) = (d.path().join("dirty/1-1-5"), d.path().join("dirty/2-1-6"));
        let g1 = s.take_over("s3://b", "a.txt", &dead, &m1).unwrap();
        assert!(g1.is_some_and(|g| g > g0));
        assert_eq!(s.take_over("s3://b", "a.txt", &dead, &m2).unwrap(), None);
        let p = s.pending(Some("s3://b")).unwrap();
        assert_eq!((p.len(), &p[0].file), (1, &m1));
        // the second mount, finding the dead mount's file gone, loses only that record
        assert!(!s.lose("s3://b", "a.txt", g0).unwrap());
        assert_eq!(
            s.pending(Some("s3://b")).unwrap().len(),
            1,
            "the take-over was lost"
        );
        assert!(s.lost(None).unwrap().is_empty());
        // the record as it is now, its bytes gone: listed as lost, no longer waiting
        let mine = s.pending(Some("s3://b")).unwrap().remove(0);
        assert!(s.lose("s3://b", "a.txt", mine.gen).unwrap());
        assert!(s.pending(Some("s3://b")).unwrap().is_empty());
        let lost = MountState::open(d.path())
            .unwrap()
            .lost(Some("s3://b"))
            .unwrap();
        assert_eq!(lost.len(), 1);
        assert_eq!(
            (&lost[0].rel, &lost[0].file, lost[0].size, lost[0].since),
            (&mine.rel, &m1, 3, mine.since)
        );
        assert!(s.lost(Some("s3://other")).unwrap().is_empty());
    }

    #[test]
    fn a_waiting_file_is_cleared_only_by_the_upload_of_its_own_close() {
        let d = tempfile::tempdir().unwrap();
        let s = MountState::open(d.path()).unwrap();
        let t = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let g1 = s
            .record("s3://b", "a/x.bin", Path::new("/c/1"), 5, t)
            .unwrap();
        s.record("s3://other", "a/x.bin", Path::new("/c/9"), 1, t)
            .unwrap();
        // closed again while the first upload runs
        let g2 = s
            .record("s3://b", "a/x.bin", Path::new("/c/2"), 7, t)
            .unwrap();
        assert!(g2 > g1);
        assert!(
            !s.uploaded("s3://b", "a/x.bin", g1).unwrap(),
            "an older close"
        );
        let p = s.pending(Some("s3://b")).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(
            (p[0].file.as_path(), p[0].size, p[0].mtime),
            (Path::new("/c/2"), 7, t)
        );
        // a second opening of the file sees the same
        let s2 = MountState::open(d.path()).unwrap();
        assert_eq!(s2.pending(None).unwrap().len(), 2);
        assert!(s.uploaded("s3://b", "a/x.bin", g2).unwrap());
        assert!(s.pending(Some("s3://b")).unwrap().is_empty());
        s.forget("s3://other", "a/x.bin").unwrap();
        assert!(s.pending(None).unwrap().is_empty());
        s.dropped_message("s3://b", "sqs", "not JSON", b"{oops")
            .unwrap();
        let dr = s2.dropped(Some("s3://b")).unwrap();
        assert_eq!(
            (dr[0].reason.as_str(), dr[0].text.as_str()),
            ("not JSON", "{oops")
        );
        assert!(s.dropped(Some("s3://other")).unwrap().is_empty());
    }

    #[test]
    fn a_new_generation_is_found_by_an_index_not_a_scan_of_every_record() {
        // each close with --write-back asks for the newest generation: a scan of every
        // waiting record made a tree of 20,000 files quadratic (44 s of SQLite)
        let d = tempfile::tempdir().unwrap();
        let s = MountState::open(d.path()).unwrap();
        let conn = s.conn();
        let mut q = conn
            .prepare("EXPLAIN QUERY PLAN SELECT COALESCE(MAX(gen), 0) FROM pending WHERE src = ?1")
            .unwrap();
        let plan: Vec<String> = q
            .query_map(["s3://b"], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter()
                .any(|p| p.contains("COVERING INDEX pending_gen")),
            "{plan:?}"
        );
    }

    #[test]
    fn a_generation_is_never_given_twice_even_after_its_record_is_forgotten() {
        let d = tempfile::tempdir().unwrap();
        let s = MountState::open(d.path()).unwrap();
        let t = UNIX_EPOCH;
        let g1 = s.record("s3://b", "x", Path::new("/c/1"), 1, t).unwrap();
        // deleted through the mount while its upload ran; then written and closed again
        s.forget("s3://b", "x").unwrap();
        let g2 = s.record("s3://b", "x", Path::new("/c/2"), 2, t).unwrap();
        assert_ne!(g1, g2);
        // the old upload ends: it does not clear the new close
        assert!(!s.uploaded("s3://b", "x", g1).unwrap());
        assert_eq!(s.pending(Some("s3://b")).unwrap().len(), 1);
        // a state from before the sequence (records only) goes on above them
        let conn = s.conn();
        conn.execute("DELETE FROM gens", []).unwrap();
        drop(conn);
        let g3 = s.record("s3://b", "y", Path::new("/c/3"), 3, t).unwrap();
        assert!(g3 > g2);
    }
}
