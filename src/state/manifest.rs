//! The manifest: one SQLite file (WAL) holding, per pair and side, what slate last saw or wrote
//! for every key. It lets `sync --once` skip listing the destination, `diff --from-manifest`
//! answer with no request at all, and a rerun resume where a killed one stopped.
//!
//! A listing pass goes into a temporary `scan` table (one row per key, both sides), which
//! SQLite sorts and joins with the manifest rows; the planner then reads it back in key-ordered
//! pages, so memory does not grow with the number of objects. No rusqlite type leaves this
//! module, so another engine can stand behind the same API later (DESIGN.md).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension};

use crate::core::error::{Result, SlateError};

/// Migrations, applied in order; `PRAGMA user_version` is the number of the last one applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../schema/0001_init.sql"),
    include_str!("../../schema/0002_inbox.sql"),
    include_str!("../../schema/0003_tombstones.sql"),
    include_str!("../../schema/0004_jobs.sql"),
    include_str!("../../schema/0005_expansions.sql"),
];

/// Which side of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Src = 0,
    Dst = 1,
}

/// What is known of one object on one side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub size: u64,
    pub etag: Option<String>,
    /// Unix milliseconds.
    pub mtime_ms: Option<i64>,
}

/// The temporary scan table of a pair (a quoted identifier: the id is an integer).
fn scan_table(pair_id: i64) -> String {
    format!("temp.\"scan_{pair_id}\"")
}

/// One key of a scan: what the listings saw, and what the manifest recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanRow {
    pub key: String,
    pub src: Option<State>,
    pub dst: Option<State>,
    pub m_src: Option<State>,
    pub m_dst: Option<State>,
}

/// A pair as the manifest knows it.
#[derive(Debug, Clone)]
pub struct PairInfo {
    pub id: i64,
    pub src: String,
    pub dst: String,
    pub created_at: i64,
    pub last_sync_at: Option<i64>,
    pub src_objects: u64,
    pub src_bytes: u64,
    pub dst_objects: u64,
}

/// A row to record.
#[derive(Debug, Clone)]
pub struct Record {
    pub side: Side,
    pub key: String,
    pub state: State,
    pub hash: Option<String>,
}

/// The manifest database.
pub struct Manifest {
    conn: Mutex<Connection>,
    path: PathBuf,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The default database path: `$XDG_DATA_HOME/slate/slate.db` or `~/.local/share/slate/slate.db`.
pub fn default_path() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("slate/slate.db")
}

fn state(size: Option<i64>, etag: Option<String>, mtime: Option<i64>) -> Option<State> {
    size.map(|s| State {
        size: s.max(0) as u64,
        etag,
        mtime_ms: mtime,
    })
}

impl Manifest {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    /// A database written by a newer slate is refused.
    pub fn open(path: &Path) -> Result<Manifest> {
        let err = |why: String| SlateError::Manifest {
            path: path.display().to_string(),
            why,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| err(format!("creating {}: {e}", dir.display())))?;
        }
        let conn = Connection::open(path).map_err(|e| err(e.to_string()))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .map_err(|e| err(e.to_string()))?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA foreign_keys = ON;
             PRAGMA temp_store = FILE;
             PRAGMA cache_size = -32768;",
        )
        .map_err(|e| err(e.to_string()))?;
        // Each migration in its own IMMEDIATE transaction that reads the version again: two
        // processes opening a new database at once must not both apply migration 1.
        let mut conn = conn;
        let known = MIGRATIONS.len() as i64;
        loop {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| err(e.to_string()))?;
            let version: i64 = tx
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|e| err(e.to_string()))?;
            if version > known {
                return Err(err(format!(
                    "written by a newer slate (schema version {version}, this slate knows up to {known}); upgrade slate or use another --db"
                )));
            }
            if version == known {
                break;
            }
            let v = version + 1;
            tx.execute_batch(MIGRATIONS[version as usize])
                .map_err(|e| err(format!("migration {v:04}: {e}")))?;
            tx.execute_batch(&format!("PRAGMA user_version = {v}"))
                .map_err(|e| err(e.to_string()))?;
            tx.commit().map_err(|e| err(e.to_string()))?;
        }
        Ok(Manifest {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: impl std::fmt::Display) -> SlateError {
        SlateError::Manifest {
            path: self.path.display().to_string(),
            why: e.to_string(),
        }
    }

    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T> {
        let mut conn = self
            .conn
            .lock()
            .map_err(|_| self.err("internal: manifest lock poisoned"))?;
        f(&mut conn).map_err(|e| self.err(e))
    }

    /// The pair for (src, dst), created if new.
    pub fn pair(&self, src: &str, dst: &str) -> Result<PairInfo> {
        self.with(|c| {
            c.execute(
                "INSERT INTO pairs (src, dst, created_at) VALUES (?1, ?2, ?3) ON CONFLICT (src, dst) DO NOTHING",
                params![src, dst, now()],
            )?;
            Ok(())
        })?;
        self.find_pair(src, dst)?
            .ok_or_else(|| self.err("pair vanished right after it was created"))
    }

    /// The pair for (src, dst), if the manifest knows it.
    pub fn find_pair(&self, src: &str, dst: &str) -> Result<Option<PairInfo>> {
        Ok(self
            .pairs()?
            .into_iter()
            .find(|p| p.src == src && p.dst == dst))
    }

    /// How many pairs the database knows.
    pub fn pair_count(&self) -> Result<usize> {
        self.with(|c| {
            c.query_row("SELECT COUNT(*) FROM pairs", [], |r| r.get::<_, i64>(0))
                .map(|n| n as usize)
        })
    }

    /// Every pair, with its object counts.
    pub fn pairs(&self) -> Result<Vec<PairInfo>> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT p.id, p.src, p.dst, p.created_at, p.last_sync_at,
                    (SELECT COUNT(*) FROM objects o WHERE o.pair_id = p.id AND o.side = 0),
                    (SELECT COALESCE(SUM(size), 0) FROM objects o WHERE o.pair_id = p.id AND o.side = 0),
                    (SELECT COUNT(*) FROM objects o WHERE o.pair_id = p.id AND o.side = 1)
                 FROM pairs p ORDER BY p.id",
            )?;
            let rows = st.query_map([], |r| {
                Ok(PairInfo {
                    id: r.get(0)?,
                    src: r.get(1)?,
                    dst: r.get(2)?,
                    created_at: r.get(3)?,
                    last_sync_at: r.get(4)?,
                    src_objects: r.get::<_, i64>(5)? as u64,
                    src_bytes: r.get::<_, i64>(6)? as u64,
                    dst_objects: r.get::<_, i64>(7)? as u64,
                })
            })?;
            rows.collect()
        })
    }

    /// Marks a full reconcile of the pair as finished now.
    pub fn mark_synced(&self, pair_id: i64, note: &str) -> Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE pairs SET last_sync_at = ?1, last_sync_note = ?2 WHERE id = ?3",
                params![now(), note, pair_id],
            )
            .map(|_| ())
        })
    }

    /// The newest ordering token applied for a source key: the event's token recorded with
    /// its object, or its tombstone's (tokens are normalised text, ordered as strings).
    pub fn last_token(&self, pair_id: i64, key: &str) -> Result<Option<String>> {
        self.with(|c| {
            c.query_row(
                "SELECT MAX(t) FROM (
                    SELECT sequencer AS t FROM objects WHERE pair_id = ?1 AND side = 0 AND key = ?2
                    UNION ALL
                    SELECT sequencer FROM tombstones WHERE pair_id = ?1 AND key = ?2)",
                params![pair_id, key],
                |r| r.get(0),
            )
        })
    }

    /// Records the token of the event whose reconcile just copied (or confirmed) `key`.
    pub fn set_token(&self, pair_id: i64, key: &str, token: &str) -> Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE objects SET sequencer = ?3 WHERE pair_id = ?1 AND side = 0 AND key = ?2
                 AND (sequencer IS NULL OR sequencer < ?3)",
                params![pair_id, key, token],
            )
            .map(|_| ())
        })
    }

    /// Leaves a tombstone for a delete applied on an event with `token` (the newest wins).
    pub fn tombstone(&self, pair_id: i64, key: &str, token: &str) -> Result<()> {
        self.with(|c| {
            c.execute(
                "INSERT INTO tombstones (pair_id, key, sequencer, deleted_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (pair_id, key) DO UPDATE SET sequencer = excluded.sequencer,
                    deleted_at = excluded.deleted_at WHERE excluded.sequencer > tombstones.sequencer",
                params![pair_id, key, token, now()],
            )
            .map(|_| ())
        })
    }

    /// Drops tombstones older than `max_age_secs`; returns how many.
    pub fn prune_tombstones(&self, max_age_secs: i64) -> Result<u64> {
        self.with(|c| {
            c.execute(
                "DELETE FROM tombstones WHERE deleted_at < ?1",
                params![now() - max_age_secs],
            )
            .map(|n| n as u64)
        })
    }

    /// Records rows (upserts), all in one transaction.
    pub fn record(&self, pair_id: i64, recs: &[Record]) -> Result<()> {
        if recs.is_empty() {
            return Ok(());
        }
        let t = now();
        self.with(|c| {
            let tx = c.transaction()?;
            {
                let mut st = tx.prepare_cached(
                    "INSERT INTO objects (pair_id, side, key, size, etag, last_modified, hash, synced_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                     ON CONFLICT (pair_id, side, key) DO UPDATE SET size = excluded.size,
                        etag = excluded.etag, last_modified = excluded.last_modified,
                        hash = COALESCE(excluded.hash, objects.hash), synced_at = excluded.synced_at",
                )?;
                for r in recs {
                    st.execute(params![
                        pair_id,
                        r.side as i64,
                        r.key,
                        r.state.size as i64,
                        r.state.etag,
                        r.state.mtime_ms,
                        r.hash,
                        t
                    ])?;
                }
            }
            tx.commit()
        })
    }

    /// Forgets keys on both sides (after a delete), in one transaction.
    pub fn forget(&self, pair_id: i64, keys: &[String]) -> Result<()> {
        self.with(|c| {
            let tx = c.transaction()?;
            {
                let mut st =
                    tx.prepare_cached("DELETE FROM objects WHERE pair_id = ?1 AND key = ?2")?;
                for k in keys {
                    st.execute(params![pair_id, k])?;
                }
            }
            tx.commit()
        })
    }

    /// Starts a scan of a pair: an empty temporary table keyed by key. Each pair has its own
    /// (one process may reconcile several pairs at once over one connection).
    pub fn scan_reset(&self, pair_id: i64) -> Result<()> {
        let t = scan_table(pair_id);
        self.with(|c| {
            c.execute_batch(&format!(
                "DROP TABLE IF EXISTS {t};
                 CREATE TEMP TABLE {t} (
                    key TEXT PRIMARY KEY,
                    s_size INTEGER, s_etag TEXT, s_mtime INTEGER,
                    d_size INTEGER, d_etag TEXT, d_mtime INTEGER,
                    action INTEGER
                 ) WITHOUT ROWID;"
            ))
        })
    }

    /// Adds listed objects of one side to the scan, in one transaction.
    pub fn scan_add(&self, pair_id: i64, side: Side, rows: &[(String, State)]) -> Result<()> {
        let t = scan_table(pair_id);
        let sql = match side {
            Side::Src => format!(
                "INSERT INTO {t} (key, s_size, s_etag, s_mtime) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (key) DO UPDATE SET s_size = excluded.s_size, s_etag = excluded.s_etag, s_mtime = excluded.s_mtime"
            ),
            Side::Dst => format!(
                "INSERT INTO {t} (key, d_size, d_etag, d_mtime) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (key) DO UPDATE SET d_size = excluded.d_size, d_etag = excluded.d_etag, d_mtime = excluded.d_mtime"
            ),
        };
        self.with(|c| {
            let tx = c.transaction()?;
            {
                let mut st = tx.prepare_cached(&sql)?;
                for (k, s) in rows {
                    st.execute(params![k, s.size as i64, s.etag, s.mtime_ms])?;
                }
            }
            tx.commit()
        })
    }

    /// Fills the destination side of the scan from the manifest (when it can vouch for it).
    pub fn scan_dst_from_manifest(&self, pair_id: i64) -> Result<u64> {
        let t = scan_table(pair_id);
        self.with(|c| {
            c.execute(
                &format!("INSERT INTO {t} (key, d_size, d_etag, d_mtime)
                 SELECT key, size, etag, last_modified FROM objects WHERE pair_id = ?1 AND side = 1 AND true
                 ON CONFLICT (key) DO UPDATE SET d_size = excluded.d_size, d_etag = excluded.d_etag, d_mtime = excluded.d_mtime"),
                params![pair_id],
            )
            .map(|n| n as u64)
        })
    }

    /// Fills both sides of the scan from the manifest alone (`diff --from-manifest`).
    pub fn scan_from_manifest(&self, pair_id: i64) -> Result<()> {
        let t = scan_table(pair_id);
        self.with(|c| {
            c.execute(
                &format!("INSERT INTO {t} (key, s_size, s_etag, s_mtime)
                 SELECT key, size, etag, last_modified FROM objects WHERE pair_id = ?1 AND side = 0"),
                params![pair_id],
            )?;
            Ok(())
        })?;
        self.scan_dst_from_manifest(pair_id).map(|_| ())
    }

    /// Reads the scan in key order after `after`, joined with the manifest rows of the pair.
    /// With `action`, only rows planned for that action.
    pub fn scan_page(
        &self,
        pair_id: i64,
        after: &str,
        limit: usize,
        action: Option<u8>,
    ) -> Result<Vec<(ScanRow, Option<u8>)>> {
        let t = scan_table(pair_id);
        self.with(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT s.key, s.s_size, s.s_etag, s.s_mtime, s.d_size, s.d_etag, s.d_mtime,
                        ms.size, ms.etag, ms.last_modified, md.size, md.etag, md.last_modified, s.action
                 FROM {t} s
                 LEFT JOIN objects ms ON ms.pair_id = ?1 AND ms.side = 0 AND ms.key = s.key
                 LEFT JOIN objects md ON md.pair_id = ?1 AND md.side = 1 AND md.key = s.key
                 WHERE s.key > ?2 AND (?4 IS NULL OR s.action = ?4)
                 ORDER BY s.key LIMIT ?3"
            ))?;
            let rows = st.query_map(params![pair_id, after, limit as i64, action.map(i64::from)], |r| {
                Ok((
                    ScanRow {
                        key: r.get(0)?,
                        src: state(r.get(1)?, r.get(2)?, r.get(3)?),
                        dst: state(r.get(4)?, r.get(5)?, r.get(6)?),
                        m_src: state(r.get(7)?, r.get(8)?, r.get(9)?),
                        m_dst: state(r.get(10)?, r.get(11)?, r.get(12)?),
                    },
                    r.get::<_, Option<i64>>(13)?.map(|a| a as u8),
                ))
            })?;
            rows.collect()
        })
    }

    /// Stores the planned action of scan rows, in one transaction.
    pub fn scan_set_actions(&self, pair_id: i64, actions: &[(String, u8)]) -> Result<()> {
        let t = scan_table(pair_id);
        self.with(|c| {
            let tx = c.transaction()?;
            {
                let mut st =
                    tx.prepare_cached(&format!("UPDATE {t} SET action = ?2 WHERE key = ?1"))?;
                for (k, a) in actions {
                    st.execute(params![k, *a as i64])?;
                }
            }
            tx.commit()
        })
    }

    /// Number of manifest rows of a pair's side.
    pub fn count(&self, pair_id: i64, side: Side) -> Result<u64> {
        self.with(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM objects WHERE pair_id = ?1 AND side = ?2",
                params![pair_id, side as i64],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
        })
    }

    /// After a full, unfiltered pass: deletes the manifest rows of a pair's side for keys that
    /// side's listing did not show and that this pass did not copy there (objects removed
    /// behind slate's back). Returns how many.
    pub fn prune_unseen(&self, pair_id: i64, side: Side) -> Result<u64> {
        let t = scan_table(pair_id);
        let keep = match side {
            Side::Src => format!("SELECT key FROM {t} WHERE s_size IS NOT NULL"),
            // 3 and 4 are the copy actions (reconcile::plan::Action::CopyMissing/CopyChanged)
            Side::Dst => {
                format!("SELECT key FROM {t} WHERE d_size IS NOT NULL OR action IN (3, 4)")
            }
        };
        self.with(|c| {
            c.execute(
                &format!(
                    "DELETE FROM objects WHERE pair_id = ?1 AND side = ?2 AND key NOT IN ({keep})"
                ),
                params![pair_id, side as i64],
            )
            .map(|n| n as u64)
        })
    }

    /// One key's recorded state on one side.
    pub fn get(&self, pair_id: i64, side: Side, key: &str) -> Result<Option<State>> {
        self.with(|c| {
            c.query_row(
                "SELECT size, etag, last_modified FROM objects WHERE pair_id = ?1 AND side = ?2 AND key = ?3",
                params![pair_id, side as i64, key],
                |r| Ok(state(r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map(Option::flatten)
        })
    }

    /// Up to `limit` keys recorded on one side under `prefix` (`""`: all, else ending with
    /// `/`) after the key `after`, in key order: one page of a folder renamed or removed as a
    /// whole.
    pub fn keys_under_page(
        &self,
        pair_id: i64,
        side: Side,
        prefix: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<String>> {
        // every key under "a/b/" sorts in ["a/b/", "a/b0"): '0' follows '/' in byte order
        let hi = match prefix.strip_suffix('/') {
            Some(p) => format!("{p}0"),
            None => "\u{10ffff}".repeat(2),
        };
        let lo = if after > prefix { after } else { prefix };
        let strict = after > prefix;
        self.with(|c| {
            let mut st = c.prepare_cached(
                "SELECT key FROM objects WHERE pair_id = ?1 AND side = ?2
                   AND (key > ?3 OR (key = ?3 AND ?4 = 0)) AND key < ?5
                 ORDER BY key LIMIT ?6",
            )?;
            let rows = st.query_map(
                params![pair_id, side as i64, lo, strict as i64, hi, limit as i64],
                |r| r.get(0),
            )?;
            rows.collect()
        })
    }

    /// The synced_at of one key's row (tests and `status`).
    pub fn synced_at(&self, pair_id: i64, side: Side, key: &str) -> Result<Option<i64>> {
        self.with(|c| {
            c.query_row(
                "SELECT synced_at FROM objects WHERE pair_id = ?1 AND side = ?2 AND key = ?3",
                params![pair_id, side as i64, key],
                |r| r.get(0),
            )
            .optional()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(size: u64, etag: &str) -> State {
        State {
            size,
            etag: Some(etag.to_string()),
            mtime_ms: Some(1),
        }
    }

    #[test]
    fn two_pairs_scanned_at_once_keep_their_own_rows() {
        // one process, one connection, several pairs reconciling concurrently: a scan of one
        // pair must never see (or reset) another's
        let dir = tempfile::tempdir().unwrap();
        let m = Manifest::open(&dir.path().join("s.db")).unwrap();
        let a = m.pair("az://c/a", "/tmp/a").unwrap();
        let b = m.pair("gs://c/b", "/tmp/b").unwrap();
        m.scan_reset(a.id).unwrap();
        m.scan_add(a.id, Side::Src, &[("a1".into(), st(1, "e"))])
            .unwrap();
        m.scan_reset(b.id).unwrap(); // the other pair starts its scan half-way through a's
        m.scan_add(b.id, Side::Src, &[("b1".into(), st(2, "f"))])
            .unwrap();
        m.scan_set_actions(a.id, &[("a1".into(), 3)]).unwrap();
        let keys = |id| -> Vec<(String, Option<u8>)> {
            m.scan_page(id, "", 10, None)
                .unwrap()
                .into_iter()
                .map(|(r, a)| (r.key, a))
                .collect()
        };
        assert_eq!(keys(a.id), vec![("a1".to_string(), Some(3))]);
        assert_eq!(keys(b.id), vec![("b1".to_string(), None)]);
    }

    #[test]
    fn tokens_and_tombstones_keep_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manifest::open(&dir.path().join("s.db")).unwrap();
        let p = m.pair("az://c/a", "/tmp/a").unwrap().id;
        assert_eq!(m.last_token(p, "k").unwrap(), None);
        // no object row yet: nothing to attach the token to
        m.set_token(p, "k", "05").unwrap();
        assert_eq!(m.last_token(p, "k").unwrap(), None);
        let rec = Record {
            side: Side::Src,
            key: "k".into(),
            state: st(1, "e"),
            hash: None,
        };
        m.record(p, std::slice::from_ref(&rec)).unwrap();
        m.set_token(p, "k", "05").unwrap();
        m.set_token(p, "k", "03").unwrap(); // older: ignored
        assert_eq!(m.last_token(p, "k").unwrap().as_deref(), Some("05"));
        m.record(p, &[rec]).unwrap(); // a reconcile re-records the row: the token stays
        assert_eq!(m.last_token(p, "k").unwrap().as_deref(), Some("05"));
        m.tombstone(p, "k", "07").unwrap();
        m.tombstone(p, "k", "06").unwrap(); // older: ignored
        assert_eq!(m.last_token(p, "k").unwrap().as_deref(), Some("07"));
        m.tombstone(p, "gone", "01").unwrap();
        assert_eq!(m.last_token(p, "gone").unwrap().as_deref(), Some("01"));
        assert_eq!(
            m.prune_tombstones(3600).unwrap(),
            0,
            "fresh tombstones stay"
        );
        assert_eq!(m.prune_tombstones(-10).unwrap(), 2);
        assert_eq!(m.last_token(p, "gone").unwrap(), None);
    }

    #[test]
    fn migrates_records_scans_and_refuses_newer_schemas() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/slate.db");
        let m = Manifest::open(&path).unwrap();
        let p = m.pair("s3://a/x", "gs://b/y").unwrap();
        assert_eq!(m.pair("s3://a/x", "gs://b/y").unwrap().id, p.id);
        m.record(
            p.id,
            &[
                Record {
                    side: Side::Src,
                    key: "k1".into(),
                    state: st(1, "e1"),
                    hash: Some("h".into()),
                },
                Record {
                    side: Side::Dst,
                    key: "k1".into(),
                    state: st(1, "d1"),
                    hash: None,
                },
                Record {
                    side: Side::Dst,
                    key: "gone".into(),
                    state: st(5, "d5"),
                    hash: None,
                },
            ],
        )
        .unwrap();
        m.scan_reset(p.id).unwrap();
        m.scan_add(
            p.id,
            Side::Src,
            &[("k1".into(), st(1, "e1")), ("k2".into(), st(2, "e2"))],
        )
        .unwrap();
        assert_eq!(m.scan_dst_from_manifest(p.id).unwrap(), 2);
        let rows = m.scan_page(p.id, "", 10, None).unwrap();
        let keys: Vec<_> = rows.iter().map(|(r, _)| r.key.as_str()).collect();
        assert_eq!(keys, vec!["gone", "k1", "k2"]);
        assert_eq!(rows[1].0.m_src, Some(st(1, "e1")));
        assert_eq!(rows[1].0.dst, Some(st(1, "d1")));
        assert_eq!(rows[2].0.dst, None);
        m.scan_set_actions(p.id, &[("k2".into(), 3)]).unwrap();
        let only = m.scan_page(p.id, "", 10, Some(3)).unwrap();
        assert_eq!(only.len(), 1);
        assert_eq!(
            m.scan_page(p.id, "k1", 10, None).unwrap().len(),
            1,
            "paging by key"
        );
        m.forget(p.id, &["gone".into()]).unwrap();
        assert_eq!(m.count(p.id, Side::Dst).unwrap(), 1);
        drop(m);

        // a database from a newer slate is refused with a clear error
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA user_version = 99").unwrap();
        drop(c);
        let e = Manifest::open(&path).err().unwrap().to_string();
        assert!(e.contains("newer slate") && e.contains("slate.db"), "{e}");
    }
}
