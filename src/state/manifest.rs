//! The manifest: one SQLite file (WAL) holding, per pair and side, what slate last saw or wrote
//! for every key. It lets `sync --once` skip listing the destination, `diff --from-manifest`
//! answer with no request at all, and a rerun resume where a killed one stopped.
//!
//! A reconcile reads a side's rows in key-ordered pages ([`Manifest::side_page`]) alongside a
//! sorted listing, so memory does not grow with the number of objects. One connection writes
//! (SQLite has one writer at a time anyway); a few more only read, so that the API and
//! reconciles reading pages never wait behind a write (WAL lets readers and the writer run
//! together).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension};

use crate::core::error::{Result, SlateError};
pub use crate::core::object::State;

/// Migrations, applied in order; `PRAGMA user_version` is the number of the last one applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../schema/0001_init.sql"),
    include_str!("../../schema/0002_inbox.sql"),
    include_str!("../../schema/0003_tombstones.sql"),
    include_str!("../../schema/0004_jobs.sql"),
    include_str!("../../schema/0005_expansions.sql"),
    include_str!("../../schema/0006_leases.sql"),
    include_str!("../../schema/0007_equality.sql"),
    include_str!("../../schema/0008_uploads.sql"),
];

/// Which side of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Src = 0,
    Dst = 1,
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

/// The temporary table of one reconcile's planned rows (see [`Manifest::spill_new`]).
#[derive(Debug, Clone)]
pub struct Spill {
    table: String,
}

/// A key a reconcile plans to act on: the action (the planner's, as a number), what the
/// source and destination held, and whether the key's manifest row of either side is to be
/// forgotten after a clean pass (the side no longer has it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub key: String,
    pub action: u8,
    pub src: Option<State>,
    pub dst: Option<State>,
    pub prune_src: bool,
    pub prune_dst: bool,
}

/// Which spilled rows [`Manifest::spill_page`] returns.
#[derive(Debug, Clone, Copy)]
pub enum SpillFilter {
    Action(u8),
    PruneSrc,
    PruneDst,
}

/// A row to record.
#[derive(Debug, Clone)]
pub struct Record {
    pub side: Side,
    pub key: String,
    pub state: State,
    pub hash: Option<String>,
    /// Destination rows: `copied`, or the rule that found the sides equal (`mtime`, …).
    pub equal_by: Option<&'static str>,
    /// Fingerprint of the metadata that travelled with the bytes ([`crate::core::meta::Meta`]).
    pub meta: Option<String>,
}

/// Connections that only read.
const READERS: usize = 4;

/// The manifest database.
pub struct Manifest {
    /// The one connection that writes.
    conn: Mutex<Connection>,
    /// Connections that only read (`PRAGMA query_only`), taken round-robin.
    readers: Vec<Mutex<Connection>>,
    next_reader: std::sync::atomic::AtomicUsize,
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
        // Switching a new database to WAL needs it to itself for a moment, and SQLite answers
        // "database is locked" at once (without the busy handler) when another process opens
        // it at the same instant: asked again for as long as the busy timeout.
        let started = std::time::Instant::now();
        loop {
            match conn.execute_batch("PRAGMA journal_mode = WAL;") {
                Ok(()) => break,
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::DatabaseBusy
                        && started.elapsed() < std::time::Duration::from_secs(30) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(5 + fastrand::u64(..20)));
                }
                Err(e) => return Err(err(e.to_string())),
            }
        }
        conn.execute_batch(
            "PRAGMA synchronous = NORMAL;
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
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let r = Connection::open(path).map_err(|e| err(e.to_string()))?;
            r.busy_timeout(std::time::Duration::from_secs(30))
                .map_err(|e| err(e.to_string()))?;
            r.execute_batch("PRAGMA query_only = ON; PRAGMA cache_size = -2048;")
                .map_err(|e| err(e.to_string()))?;
            readers.push(Mutex::new(r));
        }
        Ok(Manifest {
            conn: Mutex::new(conn),
            readers,
            next_reader: Default::default(),
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

    /// Runs a read on one of the reading connections (a free one if there is one).
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.readers.len();
        let start = self.next_reader.fetch_add(1, Relaxed);
        for i in 0..n {
            if let Ok(c) = self.readers[(start + i) % n].try_lock() {
                return f(&c).map_err(|e| self.err(e));
            }
        }
        let c = self.readers[start % n]
            .lock()
            .map_err(|_| self.err("internal: manifest lock poisoned"))?;
        f(&c).map_err(|e| self.err(e))
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
    /// (Its object counts are not read: 0; [`Manifest::pairs`] counts them.)
    pub fn find_pair(&self, src: &str, dst: &str) -> Result<Option<PairInfo>> {
        self.read(|c| {
            c.query_row(
                "SELECT id, src, dst, created_at, last_sync_at FROM pairs WHERE src = ?1 AND dst = ?2",
                params![src, dst],
                |r| {
                    Ok(PairInfo {
                        id: r.get(0)?,
                        src: r.get(1)?,
                        dst: r.get(2)?,
                        created_at: r.get(3)?,
                        last_sync_at: r.get(4)?,
                        src_objects: 0,
                        src_bytes: 0,
                        dst_objects: 0,
                    })
                },
            )
            .optional()
        })
    }

    /// How many pairs the database knows.
    pub fn pair_count(&self) -> Result<usize> {
        self.read(|c| {
            c.query_row("SELECT COUNT(*) FROM pairs", [], |r| r.get::<_, i64>(0))
                .map(|n| n as usize)
        })
    }

    /// Every pair, with its object counts.
    pub fn pairs(&self) -> Result<Vec<PairInfo>> {
        self.read(|c| {
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
        self.read(|c| {
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
                    "INSERT INTO objects (pair_id, side, key, size, etag, last_modified, hash, synced_at,
                        equal_by, meta)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                     ON CONFLICT (pair_id, side, key) DO UPDATE SET size = excluded.size,
                        etag = excluded.etag, last_modified = excluded.last_modified,
                        hash = COALESCE(excluded.hash, objects.hash), synced_at = excluded.synced_at,
                        equal_by = COALESCE(excluded.equal_by, objects.equal_by),
                        meta = COALESCE(excluded.meta, objects.meta)",
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
                        t,
                        r.equal_by,
                        r.meta
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
                // `side IN (0, 1)`: without the side SQLite cannot seek the primary key
                // (pair_id, side, key) and reads every row of the pair for each key
                let mut st = tx.prepare_cached(
                    "DELETE FROM objects WHERE pair_id = ?1 AND side IN (0, 1) AND key = ?2",
                )?;
                for k in keys {
                    st.execute(params![pair_id, k])?;
                }
            }
            tx.commit()
        })
    }

    /// A new, empty spill: a temporary table (on the writing connection, named for this run
    /// only) holding the rows a reconcile planned to act on. Only differences go there: a run
    /// that finds nothing to do writes nothing.
    pub fn spill_new(&self) -> Result<Spill> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let table = format!("temp.\"plan_{n}\"");
        self.with(|c| {
            c.execute_batch(&format!(
                "CREATE TEMP TABLE {table} (
                    key TEXT PRIMARY KEY, action INTEGER NOT NULL,
                    s_size INTEGER, s_etag TEXT, s_mtime INTEGER,
                    d_size INTEGER, d_etag TEXT, d_mtime INTEGER,
                    prune_src INTEGER NOT NULL, prune_dst INTEGER NOT NULL
                 ) WITHOUT ROWID;"
            ))
        })?;
        Ok(Spill { table })
    }

    /// Adds planned rows to a spill, in one transaction.
    pub fn spill_add(&self, spill: &Spill, rows: &[Planned]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let t = &spill.table;
        self.with(|c| {
            let tx = c.transaction()?;
            {
                let mut st = tx.prepare_cached(&format!(
                    "INSERT OR REPLACE INTO {t} VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
                ))?;
                for r in rows {
                    let (s, d) = (r.src.as_ref(), r.dst.as_ref());
                    st.execute(params![
                        r.key,
                        r.action as i64,
                        s.map(|s| s.size as i64),
                        s.and_then(|s| s.etag.clone()),
                        s.and_then(|s| s.mtime_ms),
                        d.map(|d| d.size as i64),
                        d.and_then(|d| d.etag.clone()),
                        d.and_then(|d| d.mtime_ms),
                        r.prune_src,
                        r.prune_dst
                    ])?;
                }
            }
            tx.commit()
        })
    }

    /// Up to `limit` spilled rows chosen by `which`, after the key `after` (`None`: from the
    /// first), in key order.
    pub fn spill_page(
        &self,
        spill: &Spill,
        which: SpillFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Planned>> {
        let t = &spill.table;
        let cond = match which {
            SpillFilter::Action(a) => format!("action = {}", a as i64),
            SpillFilter::PruneSrc => "prune_src = 1".to_string(),
            SpillFilter::PruneDst => "prune_dst = 1".to_string(),
        };
        // `key > ''` holds for every key: one statement that can seek the primary key
        let after = after.unwrap_or("");
        self.with(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT key, action, s_size, s_etag, s_mtime, d_size, d_etag, d_mtime, prune_src, prune_dst
                 FROM {t} WHERE key > ?1 AND {cond} ORDER BY key LIMIT ?2"
            ))?;
            let rows = st.query_map(params![after, limit as i64], |r| {
                Ok(Planned {
                    key: r.get(0)?,
                    action: r.get::<_, i64>(1)? as u8,
                    src: state(r.get(2)?, r.get(3)?, r.get(4)?),
                    dst: state(r.get(5)?, r.get(6)?, r.get(7)?),
                    prune_src: r.get(8)?,
                    prune_dst: r.get(9)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Drops a spill.
    pub fn spill_drop(&self, spill: &Spill) -> Result<()> {
        self.with(|c| c.execute_batch(&format!("DROP TABLE IF EXISTS {}", spill.table)))
    }

    /// Number of manifest rows of a pair's side.
    pub fn count(&self, pair_id: i64, side: Side) -> Result<u64> {
        self.read(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM objects WHERE pair_id = ?1 AND side = ?2",
                params![pair_id, side as i64],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
        })
    }

    /// Up to `limit` rows of one side of a pair after the key `after`, in key order: the
    /// manifest read alongside a sorted listing.
    pub fn side_page(
        &self,
        pair_id: i64,
        side: Side,
        after: &str,
        first: bool,
        limit: usize,
    ) -> Result<Vec<(String, State)>> {
        // two statements, not `(key > ?3 OR ?4)`: an OR keeps SQLite from seeking the
        // primary key to `after`, and every page would scan from the pair's first row
        let sql = if first {
            "SELECT key, size, etag, last_modified FROM objects
             WHERE pair_id = ?1 AND side = ?2 AND key >= ?3 ORDER BY key LIMIT ?4"
        } else {
            "SELECT key, size, etag, last_modified FROM objects
             WHERE pair_id = ?1 AND side = ?2 AND key > ?3 ORDER BY key LIMIT ?4"
        };
        self.read(|c| {
            let mut st = c.prepare_cached(sql)?;
            let rows = st.query_map(params![pair_id, side as i64, after, limit as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    State {
                        size: r.get::<_, i64>(1)?.max(0) as u64,
                        etag: r.get(2)?,
                        mtime_ms: r.get(3)?,
                    },
                ))
            })?;
            rows.collect()
        })
    }

    /// Forgets keys of one side only (rows for objects a full pass no longer saw there).
    pub fn forget_side(&self, pair_id: i64, side: Side, keys: &[String]) -> Result<()> {
        self.with(|c| {
            let tx = c.transaction()?;
            {
                let mut st = tx.prepare_cached(
                    "DELETE FROM objects WHERE pair_id = ?1 AND side = ?2 AND key = ?3",
                )?;
                for k in keys {
                    st.execute(params![pair_id, side as i64, k])?;
                }
            }
            tx.commit()
        })
    }

    /// One key's recorded state on one side.
    pub fn get(&self, pair_id: i64, side: Side, key: &str) -> Result<Option<State>> {
        self.read(|c| {
            c.query_row(
                "SELECT size, etag, last_modified FROM objects WHERE pair_id = ?1 AND side = ?2 AND key = ?3",
                params![pair_id, side as i64, key],
                |r| Ok(state(r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map(Option::flatten)
        })
    }

    /// The metadata fingerprint recorded for `key` on `side` (None: no row, or none recorded).
    pub fn meta_of(&self, pair_id: i64, side: Side, key: &str) -> Result<Option<String>> {
        self.read(|c| {
            c.query_row(
                "SELECT meta FROM objects WHERE pair_id = ?1 AND side = ?2 AND key = ?3",
                params![pair_id, side as i64, key],
                |r| r.get::<_, Option<String>>(0),
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
        // every key under "a/b/" sorts in ["a/b/", "a/b0"): '0' follows '/' in byte order;
        // under "" (everything) there is no upper bound
        let hi = prefix.strip_suffix('/').map(|p| format!("{p}0"));
        let strict = after > prefix;
        let lo = if strict { after } else { prefix };
        // one statement each way: an OR would keep SQLite from seeking the key range
        let sql = if strict {
            "SELECT key FROM objects WHERE pair_id = ?1 AND side = ?2 AND key > ?3
               AND (?4 IS NULL OR key < ?4) ORDER BY key LIMIT ?5"
        } else {
            "SELECT key FROM objects WHERE pair_id = ?1 AND side = ?2 AND key >= ?3
               AND (?4 IS NULL OR key < ?4) ORDER BY key LIMIT ?5"
        };
        self.read(|c| {
            let mut st = c.prepare_cached(sql)?;
            let rows = st.query_map(params![pair_id, side as i64, lo, hi, limit as i64], |r| {
                r.get(0)
            })?;
            rows.collect()
        })
    }

    /// The synced_at of one key's row (tests and `status`).
    pub fn synced_at(&self, pair_id: i64, side: Side, key: &str) -> Result<Option<i64>> {
        self.read(|c| {
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
            equal_by: None,
            meta: None,
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
                    equal_by: None,
                    meta: None,
                },
                Record {
                    side: Side::Dst,
                    key: "k1".into(),
                    state: st(1, "d1"),
                    hash: None,
                    equal_by: None,
                    meta: None,
                },
                Record {
                    side: Side::Dst,
                    key: "gone".into(),
                    state: st(5, "d5"),
                    hash: None,
                    equal_by: None,
                    meta: None,
                },
            ],
        )
        .unwrap();
        let keys = |side, after: &str, first, limit| -> Vec<String> {
            m.side_page(p.id, side, after, first, limit)
                .unwrap()
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        };
        assert_eq!(keys(Side::Dst, "", true, 10), vec!["gone", "k1"]);
        assert_eq!(
            keys(Side::Dst, "gone", false, 10),
            vec!["k1"],
            "paging by key"
        );
        assert_eq!(keys(Side::Dst, "", true, 1), vec!["gone"], "limit");
        assert_eq!(
            m.side_page(p.id, Side::Src, "", true, 10).unwrap(),
            vec![("k1".to_string(), st(1, "e1"))]
        );
        m.forget_side(p.id, Side::Dst, &["k1".into()]).unwrap();
        assert_eq!(
            keys(Side::Src, "", true, 10),
            vec!["k1"],
            "the other side stays"
        );
        m.forget(p.id, &["gone".into()]).unwrap();
        assert_eq!(m.count(p.id, Side::Dst).unwrap(), 0);
        drop(m);

        // a database from a newer slate is refused with a clear error
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA user_version = 99").unwrap();
        drop(c);
        let e = Manifest::open(&path).err().unwrap().to_string();
        assert!(e.contains("newer slate") && e.contains("slate.db"), "{e}");
    }
}
