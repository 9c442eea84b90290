//! The manifest: one SQLite file (WAL) holding, per pair and key, what slate last saw or wrote
//! of both sides (one row per key: `entries`). It lets `sync --once` skip listing the destination, `diff --from-manifest`
//! answer with no request at all, and a rerun resume where a killed one stopped.
//!
//! A reconcile reads a side's rows in key-ordered pages ([`Manifest::side_page`]) alongside a
//! sorted listing, so memory does not grow with the number of objects. One connection writes
//! (SQLite has one writer at a time anyway); a few more only read, so that the API and
//! reconciles reading pages never wait behind a write (WAL lets readers and the writer run
//! together).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::db::{params, Conn, Db, DbResult, Location, OptionalExtension, ToValue};
use crate::core::error::{Result, SlateError};
pub use crate::core::object::State;

/// Which side of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Src = 0,
    Dst = 1,
}

impl Side {
    /// The prefix of this side's columns in `entries`.
    fn col(self) -> &'static str {
        match self {
            Side::Src => "s_",
            Side::Dst => "d_",
        }
    }

    /// This side's MD5 ETag bytes (a destination's empty blob means the source's).
    fn md5(self) -> &'static str {
        match self {
            Side::Src => "s_md5",
            Side::Dst => "CASE WHEN length(d_md5) = 0 THEN s_md5 ELSE d_md5 END",
        }
    }
}

/// An ETag as the manifest keeps it: S3's MD5 form, `"<32 lowercase hex>"`, as its 16 bytes;
/// any other as text.
fn etag_cols(etag: &Option<String>) -> (Option<Vec<u8>>, Option<String>) {
    let md5 = etag
        .as_deref()
        .and_then(|e| e.strip_prefix('"')?.strip_suffix('"'))
        .and_then(|h| hex_bytes(h, 16));
    match md5 {
        Some(b) => (Some(b), None),
        None => (None, etag.clone()),
    }
}

/// The ETag back from its columns.
fn etag_of(md5: Option<Vec<u8>>, text: Option<String>) -> Option<String> {
    match md5 {
        Some(b) => Some(format!("\"{}\"", hex_of(&b))),
        None => text,
    }
}

/// `len` bytes from `2 × len` lowercase hex digits (uppercase would not come back the same).
fn hex_bytes(s: &str, len: usize) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if s.len() != 2 * len {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Why two sides were found equal, as stored (schema/sqlite/0013_entries.sql).
const EQUAL_BY: [&str; 6] = ["copied", "manifest", "digest", "mtime", "content", "size"];

fn equal_code(why: &str) -> Option<i64> {
    EQUAL_BY
        .iter()
        .position(|w| *w == why)
        .map(|i| i as i64 + 1)
}

/// A pair as the manifest knows it.
#[derive(Debug, Clone)]
pub struct PairInfo {
    pub id: i64,
    pub src: String,
    pub dst: String,
    pub created_at: i64,
    pub last_sync_at: Option<i64>,
    /// The daemon's last failed run of the pair (unix seconds, one-line error), until it
    /// follows again or a full reconcile finishes.
    pub last_failure: Option<(i64, String)>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
        last_failure: r
            .get::<_, Option<String>>(8)?
            .as_deref()
            .and_then(parse_failure),
    })
}

/// `failed UNIX: ERROR`, the note of a pair whose daemon run failed.
fn parse_failure(note: &str) -> Option<(i64, String)> {
    let rest = note.strip_prefix("failed ")?;
    let (at, why) = rest.split_once(": ")?;
    Some((at.parse().ok()?, why.to_string()))
}

/// Which of two records of one key came later in the slice.
fn recs_later<'a>(recs: &'a [Record], a: &'a Record, b: &'a Record) -> &'a Record {
    let at = |r: &Record| recs.iter().position(|x| std::ptr::eq(x, r));
    if at(a) > at(b) {
        a
    } else {
        b
    }
}

// The upserts of `Manifest::record`, one per side written (or both). A side written replaces
// that side; the hash, the fingerprint and equal_by are kept when the new row has none. A
// destination MD5 equal to the source's is stored as an empty blob ("the source's"); a source
// written anew first gives such a destination its own copy of the old digest.
// Source: 1 pair, 2 key, 3 size, 4 MD5, 5 ETag text, 6 mtime, 7 fingerprint, 8 hash.
const RECORD_SRC: &str = "INSERT INTO entries (pair_id, key, s_size, s_md5, s_etag, s_mtime,
        s_meta, hash)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
     ON CONFLICT (pair_id, key) DO UPDATE SET s_size = excluded.s_size,
        s_md5 = excluded.s_md5, s_etag = excluded.s_etag, s_mtime = excluded.s_mtime,
        s_meta = COALESCE(excluded.s_meta, entries.s_meta),
        d_md5 = CASE WHEN length(entries.d_md5) = 0
                      AND (excluded.s_md5 IS NULL OR excluded.s_md5 <> entries.s_md5)
                     THEN entries.s_md5 ELSE entries.d_md5 END,
        hash = COALESCE(excluded.hash, entries.hash)";
// Destination: 1 pair, 2 key, 3 size, 4 MD5, 5 ETag text, 6 mtime, 7 equal_by, 8 hash,
// 9 an empty blob.
const RECORD_DST: &str = "INSERT INTO entries (pair_id, key, d_size, d_md5, d_etag, d_mtime,
        equal_by, hash)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
     ON CONFLICT (pair_id, key) DO UPDATE SET d_size = excluded.d_size,
        d_md5 = CASE WHEN excluded.d_md5 = entries.s_md5 THEN ?9 ELSE excluded.d_md5 END,
        d_etag = excluded.d_etag, d_mtime = excluded.d_mtime,
        equal_by = COALESCE(excluded.equal_by, entries.equal_by),
        hash = COALESCE(excluded.hash, entries.hash)";
// Both: 1 pair, 2 key, 3-7 the source's as above, 8-12 the destination's (its MD5 already
// empty when equal), 13 hash.
const RECORD_BOTH: &str = "INSERT INTO entries (pair_id, key, s_size, s_md5, s_etag, s_mtime,
        s_meta, d_size, d_md5, d_etag, d_mtime, equal_by, hash)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
     ON CONFLICT (pair_id, key) DO UPDATE SET s_size = excluded.s_size,
        s_md5 = excluded.s_md5, s_etag = excluded.s_etag, s_mtime = excluded.s_mtime,
        s_meta = COALESCE(excluded.s_meta, entries.s_meta),
        d_size = excluded.d_size, d_md5 = excluded.d_md5, d_etag = excluded.d_etag,
        d_mtime = excluded.d_mtime, equal_by = COALESCE(excluded.equal_by, entries.equal_by),
        hash = COALESCE(excluded.hash, entries.hash)";

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

    /// [`Manifest::open_at`] that also rewrites an older manifest in place (`slate db
    /// migrate`): refused while another slate process uses the database.
    pub fn open_migrating(loc: &Location) -> Result<Manifest> {
        let db = Db::open_migrating(loc)?;
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
                "SELECT id, src, dst, created_at, last_sync_at, 0, 0, 0, last_sync_note FROM pairs
                 WHERE src = ?1 AND dst = ?2",
                params![src, dst],
                pair_row,
            )
            .optional()
        })
    }

    /// When pair `id` was last fully reconciled (unix ms; None: never, or no such pair).
    pub fn last_sync_of(&self, id: i64) -> Result<Option<i64>> {
        self.read(|c| {
            c.query_row(
                "SELECT last_sync_at FROM pairs WHERE id = ?1",
                params![id],
                |r| r.get::<_, Option<i64>>(0),
            )
            .optional()
            .map(Option::flatten)
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
                    (SELECT COUNT(s_size) FROM entries e WHERE e.pair_id = p.id),
                    (SELECT CAST(COALESCE(SUM(s_size), 0) AS BIGINT) FROM entries e
                       WHERE e.pair_id = p.id),
                    (SELECT COUNT(d_size) FROM entries e WHERE e.pair_id = p.id),
                    p.last_sync_note
                 FROM pairs p ORDER BY p.id",
                params![],
                pair_row,
            )
        })
    }

    /// Records that the daemon's run of the pair failed now with `error` (one line), for
    /// `slate pairs`; the time of the last full reconcile stays.
    pub fn note_failure(&self, pair_id: i64, error: &str) -> Result<()> {
        let note = format!("failed {}: {error}", now());
        self.with(|c| {
            c.execute(
                "UPDATE pairs SET last_sync_note = ?1 WHERE id = ?2",
                params![note, pair_id],
            )
            .map(|_| ())
        })
    }

    /// Forgets a failure [`Manifest::note_failure`] recorded: the pair runs again.
    pub fn clear_failure(&self, pair_id: i64) -> Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE pairs SET last_sync_note = NULL WHERE id = ?1 AND last_sync_note LIKE 'failed %'",
                params![pair_id],
            )
            .map(|_| ())
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
                    SELECT s_seq AS t FROM entries WHERE pair_id = ?1 AND key = ?2
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
                "UPDATE entries SET s_seq = ?3 WHERE pair_id = ?1 AND key = ?2
                 AND s_size IS NOT NULL AND (s_seq IS NULL OR s_seq < ?3)",
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

    /// Records rows (upserts), all in one transaction. A side's row replaces what the
    /// manifest held for that side of the key; the content hash, the source's metadata
    /// fingerprint and the reason for equality are kept when the new row has none.
    pub fn record(&self, pair_id: i64, recs: &[Record]) -> Result<()> {
        if recs.is_empty() {
            return Ok(());
        }
        // a key's two sides recorded together are written in one statement: the row is
        // written once at its full size (a row that grows later splits its page)
        let mut order: Vec<&str> = Vec::new();
        let mut sides: std::collections::HashMap<&str, [Option<&Record>; 2]> =
            std::collections::HashMap::new();
        for r in recs {
            let slot = sides.entry(r.key.as_str()).or_insert_with(|| {
                order.push(r.key.as_str());
                [None, None]
            });
            slot[r.side as usize] = Some(r);
        }
        // in key order: rows appended in order fill SQLite's pages instead of splitting them
        order.sort_unstable();
        self.with(|c| {
            for key in &order {
                let [src, dst] = sides[key];
                let hash = match (src, dst) {
                    // the later record's hash, as two upserts in a row would leave it
                    (Some(s), Some(d)) => {
                        let (first, last) = if std::ptr::eq(recs_later(recs, s, d), d) {
                            (s, d)
                        } else {
                            (d, s)
                        };
                        last.hash.as_ref().or(first.hash.as_ref())
                    }
                    (Some(r), None) | (None, Some(r)) => r.hash.as_ref(),
                    (None, None) => None,
                }
                .and_then(|h| hex_bytes(h, 16));
                let (s_md5, s_etag) = src.map(|r| etag_cols(&r.state.etag)).unwrap_or_default();
                let (d_md5, d_etag) = dst.map(|r| etag_cols(&r.state.etag)).unwrap_or_default();
                // a destination MD5 equal to the source's is kept as an empty blob ("the
                // source's"): one 16-byte digest per object that was copied whole
                let d_md5 = match (&d_md5, &s_md5) {
                    (Some(d), Some(s)) if d == s => Some(Vec::new()),
                    _ => d_md5,
                };
                let s_vals = src.map(|r| {
                    [
                        (r.state.size as i64).to_value(),
                        s_md5.to_value(),
                        s_etag.to_value(),
                        r.state.mtime_ms.to_value(),
                        r.meta.as_deref().and_then(|m| hex_bytes(m, 8)).to_value(),
                    ]
                });
                let d_vals = dst.map(|r| {
                    [
                        (r.state.size as i64).to_value(),
                        d_md5.to_value(),
                        d_etag.to_value(),
                        r.state.mtime_ms.to_value(),
                        r.equal_by.and_then(equal_code).to_value(),
                    ]
                });
                let mut p = vec![pair_id.to_value(), key.to_value()];
                let sql = match (s_vals, d_vals) {
                    (Some(sv), Some(dv)) => {
                        p.extend(sv);
                        p.extend(dv);
                        p.push(hash.to_value());
                        RECORD_BOTH
                    }
                    (Some(sv), None) => {
                        p.extend(sv);
                        p.push(hash.to_value());
                        RECORD_SRC
                    }
                    (None, Some(dv)) => {
                        p.extend(dv);
                        p.extend([hash.to_value(), Vec::<u8>::new().to_value()]);
                        RECORD_DST
                    }
                    (None, None) => continue,
                };
                c.execute(sql, &p)?;
            }
            Ok(())
        })
    }

    /// Forgets keys on both sides (after a delete), in one transaction.
    pub fn forget(&self, pair_id: i64, keys: &[String]) -> Result<()> {
        self.with(|c| {
            for k in keys {
                c.execute(
                    "DELETE FROM entries WHERE pair_id = ?1 AND key = ?2",
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
                &format!(
                    "SELECT COUNT({}size) FROM entries WHERE pair_id = ?1",
                    side.col()
                ),
                params![pair_id],
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
        let (x, md5) = (side.col(), side.md5());
        let op = if first { ">=" } else { ">" };
        let sql = format!(
            "SELECT key, {x}size, {md5}, {x}etag, {x}mtime FROM entries
             WHERE pair_id = ?1 AND key {op} ?2 AND {x}size IS NOT NULL ORDER BY key LIMIT ?3"
        );
        self.read(|c| {
            c.query_map(&sql, params![pair_id, after, limit as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    State {
                        size: r.get::<_, i64>(1)?.max(0) as u64,
                        etag: etag_of(r.get(2)?, r.get(3)?),
                        mtime_ms: r.get(4)?,
                    },
                ))
            })
        })
    }

    /// Forgets keys of one side only (rows for objects a full pass no longer saw there).
    pub fn forget_side(&self, pair_id: i64, side: Side, keys: &[String]) -> Result<()> {
        let forget = match side {
            Side::Src => {
                "UPDATE entries SET s_size = NULL, s_md5 = NULL, s_etag = NULL, s_mtime = NULL,
                    s_meta = NULL, s_seq = NULL,
                    d_md5 = CASE WHEN length(d_md5) = 0 THEN s_md5 ELSE d_md5 END
                 WHERE pair_id = ?1 AND key = ?2"
            }
            Side::Dst => {
                "UPDATE entries SET d_size = NULL, d_md5 = NULL, d_etag = NULL, d_mtime = NULL,
                    equal_by = NULL WHERE pair_id = ?1 AND key = ?2"
            }
        };
        self.with(|c| {
            for k in keys {
                c.execute(forget, params![pair_id, k])?;
                // a key neither side holds any more has no row
                c.execute(
                    "DELETE FROM entries WHERE pair_id = ?1 AND key = ?2
                     AND s_size IS NULL AND d_size IS NULL",
                    params![pair_id, k],
                )?;
            }
            Ok(())
        })
    }

    /// One key's recorded state on one side.
    pub fn get(&self, pair_id: i64, side: Side, key: &str) -> Result<Option<State>> {
        self.read(|c| {
            let (x, md5) = (side.col(), side.md5());
            c.query_row(
                &format!(
                    "SELECT {x}size, {md5}, {x}etag, {x}mtime FROM entries
                     WHERE pair_id = ?1 AND key = ?2"
                ),
                params![pair_id, key],
                |r| Ok(state(r.get(0)?, etag_of(r.get(1)?, r.get(2)?), r.get(3)?)),
            )
            .optional()
            .map(Option::flatten)
        })
    }

    /// The metadata fingerprint recorded for `key` on `side` (None: no row, or none recorded;
    /// only the source's is kept).
    pub fn meta_of(&self, pair_id: i64, side: Side, key: &str) -> Result<Option<String>> {
        if side == Side::Dst {
            return Ok(None);
        }
        self.read(|c| {
            c.query_row(
                "SELECT s_meta FROM entries WHERE pair_id = ?1 AND key = ?2",
                params![pair_id, key],
                |r| r.get::<_, Option<Vec<u8>>>(0),
            )
            .optional()
            .map(|m| m.flatten().map(|b| hex_of(&b)))
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
        let (x, op) = (side.col(), if strict { ">" } else { ">=" });
        let sql = format!(
            "SELECT key FROM entries WHERE pair_id = ?1 AND key {op} ?2
               AND (CAST(?3 AS TEXT) IS NULL OR key < ?3) AND {x}size IS NOT NULL
             ORDER BY key LIMIT ?4"
        );
        self.read(|c| c.query_map(&sql, params![pair_id, lo, &hi, limit as i64], |r| r.get(0)))
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
        two_rows_per_key_become_one_in_place,
        etags_digests_and_fingerprints_come_back_as_they_went_in,
        a_destination_md5_kept_as_the_sources_survives_the_source_changing,
        spills_and_pages_sort_keys_by_bytes,
        a_failed_run_is_noted_until_the_pair_runs_again
    );

    fn a_failed_run_is_noted_until_the_pair_runs_again(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let p = m.pair("s3://b/failing", "/tmp/failing").unwrap().id;
        let info = |m: &Manifest| m.pairs().unwrap().into_iter().find(|i| i.id == p).unwrap();
        assert_eq!(info(&m).last_failure, None);
        m.note_failure(p, "missing credentials for s3://b/failing: set AWS_…")
            .unwrap();
        let f = info(&m).last_failure.expect("noted");
        assert!(f.1.starts_with("missing credentials") && f.0 > 0, "{f:?}");
        assert_eq!(info(&m).last_sync_at, None, "a failure is no sync");
        m.clear_failure(p).unwrap();
        assert_eq!(info(&m).last_failure, None);
        // a full reconcile's note stays when nothing failed, and replaces a failure
        m.note_failure(p, "x").unwrap();
        m.mark_synced(p, "sync --once").unwrap();
        assert_eq!(info(&m).last_failure, None);
        m.clear_failure(p).unwrap();
        assert!(info(&m).last_sync_at.is_some());
    }

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
                meta: Some("0123456789abcdef".into()),
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
        assert_eq!(
            m.meta_of(p, Side::Src, "z").unwrap().as_deref(),
            Some("0123456789abcdef")
        );
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

    /// The manifest of schema 12 (SQLite) / 5 (PostgreSQL), two rows per key, migrated in
    /// place: every key once, both sides' states, tokens and fingerprints as they were.
    fn two_rows_per_key_become_one_in_place(loc: &Location) {
        let md5 = "\"0123456789abcdef0123456789abcdef\"";
        let mut sql = String::from(
            "INSERT INTO pairs (id, src, dst, created_at) VALUES (1, 's3://a/x', '/tmp/y', 5);\n",
        );
        // 1,000 keys: both sides (S3 MD5 ETag at the source, a local token at the
        // destination), every tenth only at the source, every seventh only at the destination
        for i in 0..1000 {
            let key = format!("k/{i:04}-é");
            if i % 7 != 0 {
                sql.push_str(&format!(
                    "INSERT INTO objects (pair_id, side, key, size, etag, last_modified, hash,
                        sequencer, synced_at, equal_by, meta)
                     VALUES (1, 0, '{key}', {i}, '{md5}', {}, '{:032x}', {}, 100, NULL,
                        '{:016x}');\n",
                    1000 + i,
                    i,
                    if i % 3 == 0 {
                        format!("'{:040}'", i)
                    } else {
                        "NULL".into()
                    },
                    i * 7
                ));
            }
            if i % 10 != 0 {
                sql.push_str(&format!(
                    "INSERT INTO objects (pair_id, side, key, size, etag, last_modified, hash,
                        synced_at, equal_by, meta)
                     VALUES (1, 1, '{key}', {i}, '0x8D4BCC2E4835CD{i}', {}, NULL, 200,
                        '{}', '{:016x}');\n",
                    2000 + i,
                    ["copied", "mtime", "digest"][i % 3],
                    i * 7
                ));
            }
        }
        crate::state::db::testing::at_version(loc, 12, 5, &sql);
        // never silently: a plain open (a worker starting) refuses, and names the way
        let refused = Manifest::open_at(loc).err().unwrap().to_string();
        assert!(
            refused.contains("slate db backup") && refused.contains("slate db migrate"),
            "{refused}"
        );
        // nor while another slate process has it open (a worker of the old layout)
        let other = crate::state::db::testing::another_user(loc);
        let busy = Manifest::open_migrating(loc).err().unwrap().to_string();
        assert!(busy.contains("other slate processes use it"), "{busy}");
        drop(other);
        // the server drops a closed session from its list a moment later
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let m = loop {
            match Manifest::open_migrating(loc) {
                Ok(m) => break m,
                Err(e) if std::time::Instant::now() < deadline => {
                    assert!(e.to_string().contains("other slate processes"), "{e}");
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(e) => panic!("{e}"),
            }
        };
        let p = m.pairs().unwrap();
        let both = (0..1000).filter(|i| i % 7 != 0 && i % 10 != 0).count() as u64;
        let src = (0..1000).filter(|i| i % 7 != 0).count() as u64;
        let dst = (0..1000).filter(|i| i % 10 != 0).count() as u64;
        assert_eq!((p.len(), p[0].src_objects, p[0].dst_objects), (1, src, dst));
        let rows: i64 = m
            .read(|c| c.query_row("SELECT COUNT(*) FROM entries", params![], |r| r.get(0)))
            .unwrap();
        assert_eq!(rows as u64, src + dst - both, "one row per key");
        // spot checks: a key of both sides, one of each side alone
        let k = |i: usize| format!("k/{i:04}-é");
        assert_eq!(
            m.get(1, Side::Src, &k(3)).unwrap(),
            Some(State {
                size: 3,
                etag: Some(md5.into()),
                mtime_ms: Some(1003)
            })
        );
        assert_eq!(
            m.get(1, Side::Dst, &k(3)).unwrap(),
            Some(State {
                size: 3,
                etag: Some("0x8D4BCC2E4835CD3".into()),
                mtime_ms: Some(2003)
            })
        );
        assert_eq!(m.last_token(1, &k(3)).unwrap(), Some(format!("{:040}", 3)));
        assert_eq!(m.last_token(1, &k(4)).unwrap(), None);
        assert_eq!(
            m.meta_of(1, Side::Src, &k(4)).unwrap(),
            Some(format!("{:016x}", 28))
        );
        assert_eq!(m.get(1, Side::Dst, &k(10)).unwrap(), None, "source only");
        assert!(m.get(1, Side::Src, &k(10)).unwrap().is_some());
        assert_eq!(
            m.get(1, Side::Src, &k(7)).unwrap(),
            None,
            "destination only"
        );
        assert!(m.get(1, Side::Dst, &k(7)).unwrap().is_some());
        let page = m.side_page(1, Side::Dst, "", true, 5000).unwrap();
        assert_eq!(page.len() as u64, dst);
        assert!(page.windows(2).all(|w| w[0].0 < w[1].0), "in key order");
        // the old table is gone, and a new record lands in the one row
        assert!(m
            .read(|c| c.exists("SELECT 1 FROM entries WHERE pair_id = 1", params![]))
            .unwrap());
        assert!(m
            .read(
                |c| c.query_row("SELECT COUNT(*) FROM objects", params![], |r| r
                    .get::<_, i64>(0))
            )
            .is_err());
    }

    /// Every ETag form a store gives comes back byte for byte; MD5 ETags take 16 bytes.
    fn etags_digests_and_fingerprints_come_back_as_they_went_in(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let p = m.pair("s3://a/x", "az://c/y").unwrap().id;
        let etags = [
            "\"0123456789abcdef0123456789abcdef\"", // S3's MD5, quoted: packed
            "0123456789abcdef0123456789abcdef",     // bare: text
            "\"0123456789ABCDEF0123456789ABCDEF\"", // uppercase: text
            "\"0123456789abcdef0123456789abcdef-12\"", // multipart
            "\"0x8D4BCC2E4835CD0\"",                // Azure
            "CNHZkbuF/ugCEAE=",                     // GCS
            "\"\"",
        ];
        let recs: Vec<Record> = etags
            .iter()
            .enumerate()
            .flat_map(|(i, e)| {
                [Side::Src, Side::Dst].map(|side| Record {
                    side,
                    key: format!("k{i}"),
                    state: st(i as u64, e),
                    hash: Some(format!("{i:032x}")),
                    equal_by: Some("content"),
                    meta: Some(format!("{i:016x}")),
                })
            })
            .collect();
        m.record(p, &recs).unwrap();
        for (i, e) in etags.iter().enumerate() {
            for side in [Side::Src, Side::Dst] {
                assert_eq!(
                    m.get(p, side, &format!("k{i}")).unwrap(),
                    Some(st(i as u64, e)),
                    "{side:?} {e}"
                );
            }
        }
        let packed: i64 = m
            .read(|c| {
                c.query_row(
                    "SELECT COUNT(*) FROM entries WHERE s_md5 IS NOT NULL AND d_md5 IS NOT NULL
                     AND s_etag IS NULL AND d_etag IS NULL",
                    params![],
                    |r| r.get(0),
                )
            })
            .unwrap();
        assert_eq!(packed, 1, "only the quoted lowercase MD5 is packed");
        assert_eq!(
            m.meta_of(p, Side::Src, "k5").unwrap(),
            Some(format!("{:016x}", 5))
        );
        // a side forgotten leaves the other; both forgotten, no row
        m.forget_side(p, Side::Dst, &["k1".into()]).unwrap();
        assert!(m.get(p, Side::Src, "k1").unwrap().is_some());
        m.forget_side(p, Side::Src, &["k1".into()]).unwrap();
        assert!(!m
            .read(|c| c.exists("SELECT 1 FROM entries WHERE key = 'k1'", params![]))
            .unwrap());
    }

    /// A destination MD5 equal to the source's is stored once; the destination keeps it when
    /// the source's changes or goes, whichever way the rows were written.
    fn a_destination_md5_kept_as_the_sources_survives_the_source_changing(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let p = m.pair("s3://a/x", "s3://b/y").unwrap().id;
        let md5 = |n: u8| format!("\"{:032x}\"", n);
        let rec = |side, key: &str, e: &str| Record {
            side,
            key: key.into(),
            state: st(1, e),
            hash: None,
            equal_by: Some("copied"),
            meta: None,
        };
        // together (one statement), and one side after the other
        m.record(
            p,
            &[rec(Side::Src, "a", &md5(1)), rec(Side::Dst, "a", &md5(1))],
        )
        .unwrap();
        m.record(p, &[rec(Side::Src, "b", &md5(1))]).unwrap();
        m.record(p, &[rec(Side::Dst, "b", &md5(1))]).unwrap();
        let empty: i64 = m
            .read(|c| {
                c.query_row(
                    "SELECT COUNT(*) FROM entries WHERE length(d_md5) = 0",
                    params![],
                    |r| r.get(0),
                )
            })
            .unwrap();
        assert_eq!(empty, 2, "stored once");
        for k in ["a", "b"] {
            assert_eq!(m.get(p, Side::Dst, k).unwrap(), Some(st(1, &md5(1))));
            // the source changes: the destination still holds what was copied
            m.record(p, &[rec(Side::Src, k, &md5(2))]).unwrap();
            assert_eq!(m.get(p, Side::Src, k).unwrap(), Some(st(1, &md5(2))));
            assert_eq!(m.get(p, Side::Dst, k).unwrap(), Some(st(1, &md5(1))), "{k}");
        }
        // the source re-recorded unchanged keeps the shared form
        m.record(
            p,
            &[rec(Side::Src, "c", &md5(3)), rec(Side::Dst, "c", &md5(3))],
        )
        .unwrap();
        m.record(p, &[rec(Side::Src, "c", &md5(3))]).unwrap();
        assert_eq!(m.get(p, Side::Dst, "c").unwrap(), Some(st(1, &md5(3))));
        // the source forgotten: the destination keeps its digest
        m.forget_side(p, Side::Src, &["c".into()]).unwrap();
        assert_eq!(m.get(p, Side::Src, "c").unwrap(), None);
        assert_eq!(m.get(p, Side::Dst, "c").unwrap(), Some(st(1, &md5(3))));
        let page = m.side_page(p, Side::Dst, "", true, 10).unwrap();
        assert_eq!(
            page,
            vec![
                ("a".to_string(), st(1, &md5(1))),
                ("b".to_string(), st(1, &md5(1))),
                ("c".to_string(), st(1, &md5(3)))
            ]
        );
    }
}
