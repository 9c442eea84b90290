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
use std::time::{SystemTime, UNIX_EPOCH};

use super::db::{params, Conn, Db, DbResult, Location, OptionalExtension};
use crate::core::error::{Result, SlateError};
pub use crate::core::object::State;

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
    /// The spill's number in PostgreSQL's `spill_rows` (0 on SQLite).
    id: i64,
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

/// The state database: the manifest and, through the other modules of `state`, the inbox,
/// jobs, leases and uploads.
pub struct Manifest {
    db: Db,
    /// The path, or the URL without its password: for messages.
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

/// A pair from `id, src, dst, created_at, last_sync_at, src objects, src bytes, dst objects`.
fn pair_row(r: &super::db::Row) -> DbResult<PairInfo> {
    Ok(PairInfo {
        id: r.get(0)?,
        src: r.get(1)?,
        dst: r.get(2)?,
        created_at: r.get(3)?,
        last_sync_at: r.get(4)?,
        src_objects: r.get::<_, i64>(5)?.max(0) as u64,
        src_bytes: r.get::<_, i64>(6)?.max(0) as u64,
        dst_objects: r.get::<_, i64>(7)?.max(0) as u64,
    })
}

impl Manifest {
    /// Opens (creating if needed) the SQLite database at `path` and brings its schema up to
    /// date. A database written by a newer slate is refused.
    pub fn open(path: &Path) -> Result<Manifest> {
        Manifest::open_at(&Location::Sqlite(path.to_path_buf()))
    }

    /// Opens the database at `loc`: a SQLite file or a PostgreSQL server.
    pub fn open_at(loc: &Location) -> Result<Manifest> {
        let db = Db::open(loc)?;
        Ok(Manifest {
            path: PathBuf::from(db.shown()),
            db,
        })
    }

    /// The database's path, or its URL without the password.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when the state lives in PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.db.is_postgres()
    }

    fn err(&self, e: impl std::fmt::Display) -> SlateError {
        SlateError::Manifest {
            path: self.path.display().to_string(),
            why: e.to_string(),
        }
    }

    /// Runs `f` in one write transaction (see [`Db::write`]: on PostgreSQL it may run again).
    pub(crate) fn with<T>(&self, f: impl FnMut(&Conn) -> DbResult<T>) -> Result<T> {
        self.db.write(f)
    }

    /// [`Manifest::with`] for statements that lock the rows they take (see
    /// [`Db::write_locking`]).
    pub(crate) fn with_locking<T>(&self, f: impl FnMut(&Conn) -> DbResult<T>) -> Result<T> {
        self.db.write_locking(f)
    }

    /// Runs reads.
    pub(crate) fn read<T>(&self, f: impl FnMut(&Conn) -> DbResult<T>) -> Result<T> {
        self.db.read(f)
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
                "SELECT id, src, dst, created_at, last_sync_at, 0, 0, 0 FROM pairs
                 WHERE src = ?1 AND dst = ?2",
                params![src, dst],
                pair_row,
            )
            .optional()
        })
    }

    /// How many pairs the database knows.
    /// The ids of every pair.
    pub fn pairs_ids(&self) -> Result<Vec<i64>> {
        self.read(|c| c.query_map("SELECT id FROM pairs ORDER BY id", params![], |r| r.get(0)))
    }

    pub fn pair_count(&self) -> Result<usize> {
        self.read(|c| {
            c.query_row("SELECT COUNT(*) FROM pairs", params![], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as usize)
        })
    }

    /// Every pair, with its object counts.
    pub fn pairs(&self) -> Result<Vec<PairInfo>> {
        self.read(|c| {
            c.query_map(
                "SELECT p.id, p.src, p.dst, p.created_at, p.last_sync_at,
                    (SELECT COUNT(*) FROM objects o WHERE o.pair_id = p.id AND o.side = 0),
                    (SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM objects o
                       WHERE o.pair_id = p.id AND o.side = 0),
                    (SELECT COUNT(*) FROM objects o WHERE o.pair_id = p.id AND o.side = 1)
                 FROM pairs p ORDER BY p.id",
                params![],
                pair_row,
            )
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
                    SELECT sequencer FROM tombstones WHERE pair_id = ?1 AND key = ?2) AS tokens",
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
            {
                let sql = "INSERT INTO objects (pair_id, side, key, size, etag, last_modified, hash, synced_at,
                        equal_by, meta)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                     ON CONFLICT (pair_id, side, key) DO UPDATE SET size = excluded.size,
                        etag = excluded.etag, last_modified = excluded.last_modified,
                        hash = COALESCE(excluded.hash, objects.hash), synced_at = excluded.synced_at,
                        equal_by = COALESCE(excluded.equal_by, objects.equal_by),
                        meta = COALESCE(excluded.meta, objects.meta)";
                for r in recs {
                    c.execute(sql, params![
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
            Ok(())
        })
    }

    /// Forgets keys on both sides (after a delete), in one transaction.
    pub fn forget(&self, pair_id: i64, keys: &[String]) -> Result<()> {
        self.with(|c| {
            // `side IN (0, 1)`: without the side SQLite cannot seek the primary key
            // (pair_id, side, key) and reads every row of the pair for each key
            for k in keys {
                c.execute(
                    "DELETE FROM objects WHERE pair_id = ?1 AND side IN (0, 1) AND key = ?2",
                    params![pair_id, k],
                )?;
            }
            Ok(())
        })
    }

    /// A new, empty spill: the rows a reconcile planned to act on. Only differences go there:
    /// a run that finds nothing to do writes nothing. On SQLite a temporary table of the
    /// writing connection, named for this run only; on PostgreSQL the rows of the shared
    /// unlogged table `spill_rows` under a new spill number.
    pub fn spill_new(&self) -> Result<Spill> {
        if self.db.is_postgres() {
            let id =
                self.with(|c| c.query_row("SELECT nextval('spill_ids')", params![], |r| r.get(0)))?;
            return Ok(Spill {
                table: "spill_rows".into(),
                id,
            });
        }
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
        Ok(Spill { table, id: 0 })
    }

    /// `spill = N AND ` on PostgreSQL's shared table, nothing on a SQLite temporary table.
    fn spill_scope(&self, spill: &Spill) -> String {
        if self.db.is_postgres() {
            format!("spill = {} AND ", spill.id)
        } else {
            String::new()
        }
    }

    /// Adds planned rows to a spill, in one transaction (a key added again replaces its row).
    pub fn spill_add(&self, spill: &Spill, rows: &[Planned]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let cols =
            "key, action, s_size, s_etag, s_mtime, d_size, d_etag, d_mtime, prune_src, prune_dst";
        let set = "action = excluded.action, s_size = excluded.s_size, s_etag = excluded.s_etag,
            s_mtime = excluded.s_mtime, d_size = excluded.d_size, d_etag = excluded.d_etag,
            d_mtime = excluded.d_mtime, prune_src = excluded.prune_src, prune_dst = excluded.prune_dst";
        let sql = if self.db.is_postgres() {
            format!(
                "INSERT INTO spill_rows (spill, {cols}) VALUES ({}, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                 ON CONFLICT (spill, key) DO UPDATE SET {set}",
                spill.id
            )
        } else {
            format!(
                "INSERT INTO {} ({cols}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                 ON CONFLICT (key) DO UPDATE SET {set}",
                spill.table
            )
        };
        self.with(|c| {
            for r in rows {
                let (s, d) = (r.src.as_ref(), r.dst.as_ref());
                c.execute(
                    &sql,
                    params![
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
                    ],
                )?;
            }
            Ok(())
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
        let scope = self.spill_scope(spill);
        // `key > ''` holds for every key: one statement that can seek the primary key
        let after = after.unwrap_or("");
        let sql = format!(
            "SELECT key, action, s_size, s_etag, s_mtime, d_size, d_etag, d_mtime, prune_src, prune_dst
             FROM {t} WHERE {scope}key > ?1 AND {cond} ORDER BY key LIMIT ?2"
        );
        self.with(|c| {
            c.query_map(&sql, params![after, limit as i64], |r| {
                Ok(Planned {
                    key: r.get(0)?,
                    action: r.get::<_, i64>(1)? as u8,
                    src: state(r.get(2)?, r.get(3)?, r.get(4)?),
                    dst: state(r.get(5)?, r.get(6)?, r.get(7)?),
                    prune_src: r.get(8)?,
                    prune_dst: r.get(9)?,
                })
            })
        })
    }

    /// Drops a spill.
    pub fn spill_drop(&self, spill: &Spill) -> Result<()> {
        if self.db.is_postgres() {
            return self.with(|c| {
                c.execute("DELETE FROM spill_rows WHERE spill = ?1", params![spill.id])
                    .map(|_| ())
            });
        }
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
            c.query_map(
                sql,
                params![pair_id, side as i64, after, limit as i64],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        State {
                            size: r.get::<_, i64>(1)?.max(0) as u64,
                            etag: r.get(2)?,
                            mtime_ms: r.get(3)?,
                        },
                    ))
                },
            )
        })
    }

    /// Forgets keys of one side only (rows for objects a full pass no longer saw there).
    pub fn forget_side(&self, pair_id: i64, side: Side, keys: &[String]) -> Result<()> {
        self.with(|c| {
            for k in keys {
                c.execute(
                    "DELETE FROM objects WHERE pair_id = ?1 AND side = ?2 AND key = ?3",
                    params![pair_id, side as i64, k],
                )?;
            }
            Ok(())
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
               AND (CAST(?4 AS TEXT) IS NULL OR key < ?4) ORDER BY key LIMIT ?5"
        } else {
            "SELECT key FROM objects WHERE pair_id = ?1 AND side = ?2 AND key >= ?3
               AND (CAST(?4 AS TEXT) IS NULL OR key < ?4) ORDER BY key LIMIT ?5"
        };
        self.read(|c| {
            c.query_map(
                sql,
                params![pair_id, side as i64, lo, &hi, limit as i64],
                |r| r.get(0),
            )
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
    use crate::state::db::params;
    use crate::state::db::testing::conformance;
    use crate::state::db::Location;

    conformance!(
        tokens_and_tombstones_keep_the_newest,
        migrates_records_scans_and_refuses_newer_schemas,
        spills_and_pages_sort_keys_by_bytes
    );

    fn st(size: u64, etag: &str) -> State {
        State {
            size,
            etag: Some(etag.to_string()),
            mtime_ms: Some(1),
        }
    }

    fn tokens_and_tombstones_keep_the_newest(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
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

    fn migrates_records_scans_and_refuses_newer_schemas(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
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

        // a database from a newer slate is refused with a clear error
        match loc {
            Location::Sqlite(path) => {
                drop(m);
                let c = rusqlite::Connection::open(path).unwrap();
                c.execute_batch("PRAGMA user_version = 99").unwrap();
            }
            Location::Postgres(_) => {
                m.with(|c| c.execute("UPDATE slate_schema SET version = 99", params![]))
                    .unwrap();
                drop(m);
            }
        }
        let e = Manifest::open_at(loc).err().unwrap().to_string();
        assert!(e.contains("newer slate") && e.contains(&loc.shown()), "{e}");
    }

    fn spills_and_pages_sort_keys_by_bytes(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let p = m.pair("s3://a/x", "/tmp/y").unwrap().id;
        // byte order: 'B' < 'a', "a-b" < "a/b" < "a0" < "z" < "é" (UTF-8 0xC3)
        let keys = ["z", "é", "a/b", "a-b", "B", "a0", "a/c/d"];
        let recs: Vec<Record> = keys
            .iter()
            .map(|k| Record {
                side: Side::Src,
                key: k.to_string(),
                state: st(3, "e"),
                hash: None,
                equal_by: Some("copied"),
                meta: Some("m".into()),
            })
            .collect();
        m.record(p, &recs).unwrap();
        let page: Vec<String> = m
            .side_page(p, Side::Src, "", true, 100)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(page, ["B", "a-b", "a/b", "a/c/d", "a0", "z", "é"]);
        assert_eq!(
            m.keys_under_page(p, Side::Src, "a/", "", 100).unwrap(),
            ["a/b", "a/c/d"]
        );
        assert_eq!(
            m.keys_under_page(p, Side::Src, "a/", "a/b", 100).unwrap(),
            ["a/c/d"]
        );
        assert_eq!(m.meta_of(p, Side::Src, "z").unwrap().as_deref(), Some("m"));
        assert_eq!(m.pairs().unwrap()[0].src_bytes, 21);

        let planned = |key: &str, action: u8, prune_dst: bool| Planned {
            key: key.into(),
            action,
            src: Some(st(3, "e")),
            dst: None,
            prune_src: false,
            prune_dst,
        };
        let a = m.spill_new().unwrap();
        let b = m.spill_new().unwrap();
        m.spill_add(
            &a,
            &[
                planned("z", 1, false),
                planned("a/b", 1, true),
                planned("é", 2, false),
            ],
        )
        .unwrap();
        m.spill_add(&a, &[planned("z", 2, false)]).unwrap(); // added again: replaced
        m.spill_add(&b, &[planned("other", 1, false)]).unwrap();
        let ones = m.spill_page(&a, SpillFilter::Action(1), None, 10).unwrap();
        assert_eq!(ones, vec![planned("a/b", 1, true)], "spills are apart");
        let twos: Vec<String> = m
            .spill_page(&a, SpillFilter::Action(2), None, 10)
            .unwrap()
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(twos, ["z", "é"]);
        let after: Vec<String> = m
            .spill_page(&a, SpillFilter::Action(2), Some("z"), 10)
            .unwrap()
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(after, ["é"]);
        assert_eq!(
            m.spill_page(&a, SpillFilter::PruneDst, None, 10)
                .unwrap()
                .len(),
            1
        );
        m.spill_drop(&a).unwrap();
        assert_eq!(
            m.spill_page(&b, SpillFilter::Action(1), None, 10)
                .unwrap()
                .len(),
            1
        );
        m.spill_drop(&b).unwrap();
    }
}
