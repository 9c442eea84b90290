//! Dead letters as an operator reads them: listed (newest first), shown one by one, purged by
//! age, and taken back when a retry stored their events (see `crate::events::retry`). The
//! rows are written by [`super::inbox::Inbox::store`] (a message no pair could use, one row
//! per message) and by the daemon (a key no retry can apply).

use super::clock::now_ms;
use super::db::{params, OptionalExtension, Row};
use crate::core::error::Result;
use crate::state::manifest::Manifest;

/// How long the daemon keeps dead letters (config `daemon.dead_letter_retention`).
static RETENTION_MS: std::sync::atomic::AtomicI64 =
    std::sync::atomic::AtomicI64::new(30 * 86_400_000);

/// Sets how long dead letters are kept (the daemon drops older ones every hour).
pub fn set_retention(keep: std::time::Duration) {
    RETENTION_MS.store(
        keep.as_millis().min(i64::MAX as u128) as i64,
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// How long dead letters are kept, in milliseconds.
pub fn retention_ms() -> i64 {
    RETENTION_MS.load(std::sync::atomic::Ordering::Relaxed)
}

/// One dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Letter {
    pub id: i64,
    pub pair_id: Option<i64>,
    pub source: String,
    pub queue: String,
    pub reason: String,
    /// Unix milliseconds.
    pub received_at: i64,
    pub raw: Vec<u8>,
    pub decoded: Option<Vec<u8>>,
}

impl Letter {
    /// The text an operator reads: the decoded event when the transport decoded one, else
    /// the raw message (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(self.decoded.as_deref().unwrap_or(&self.raw)).into_owned()
    }
}

/// Which letters to list.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this pair's (`Some(None)`: only those of no pair).
    pub pair: Option<Option<i64>>,
    /// Only letters with an id below this one (paging, newest first).
    pub before_id: Option<i64>,
    pub limit: usize,
}

const COLUMNS: &str = "id, pair_id, source, queue, reason, received_at, raw, decoded";

fn letter(r: &Row) -> super::db::DbResult<Letter> {
    Ok(Letter {
        id: r.get(0)?,
        pair_id: r.get(1)?,
        source: r.get(2)?,
        queue: r.get(3)?,
        reason: r.get(4)?,
        received_at: r.get(5)?,
        raw: r.get(6)?,
        decoded: r.get(7)?,
    })
}

/// The dead letters of one database.
pub struct DeadLetters<'a> {
    m: &'a Manifest,
}

impl<'a> DeadLetters<'a> {
    pub fn new(m: &'a Manifest) -> Self {
        DeadLetters { m }
    }

    /// Letters matching `f`, newest first, at most `f.limit` (0: 100).
    pub fn list(&self, f: &Filter) -> Result<Vec<Letter>> {
        let limit = if f.limit == 0 { 100 } else { f.limit } as i64;
        let before = f.before_id.unwrap_or(i64::MAX);
        self.m.read(|c| match f.pair {
            None => c.query_map(
                &format!("SELECT {COLUMNS} FROM dead_letters WHERE id < ?1 ORDER BY id DESC LIMIT ?2"),
                params![before, limit],
                letter,
            ),
            Some(None) => c.query_map(
                &format!("SELECT {COLUMNS} FROM dead_letters WHERE pair_id IS NULL AND id < ?1 ORDER BY id DESC LIMIT ?2"),
                params![before, limit],
                letter,
            ),
            Some(Some(p)) => c.query_map(
                &format!("SELECT {COLUMNS} FROM dead_letters WHERE pair_id = ?1 AND id < ?2 ORDER BY id DESC LIMIT ?3"),
                params![p, before, limit],
                letter,
            ),
        })
    }

    /// One letter by id.
    pub fn get(&self, id: i64) -> Result<Option<Letter>> {
        self.m.read(|c| {
            c.query_row(
                &format!("SELECT {COLUMNS} FROM dead_letters WHERE id = ?1"),
                params![id],
                letter,
            )
            .optional()
        })
    }

    /// Drops the letters received before `older_than_ms` ago (0: every letter); returns how
    /// many.
    pub fn purge(&self, older_than_ms: i64) -> Result<u64> {
        let cutoff = now_ms().saturating_sub(older_than_ms);
        self.m.with(|c| {
            c.execute(
                "DELETE FROM dead_letters WHERE received_at <= ?1",
                params![cutoff],
            )
            .map(|n| n as u64)
        })
    }

    /// Letters of no pair, counted by the queue they came from.
    pub fn unowned_by_queue(&self) -> Result<Vec<(String, u64)>> {
        self.m.read(|c| {
            c.query_map(
                "SELECT queue, COUNT(*) FROM dead_letters WHERE pair_id IS NULL GROUP BY queue ORDER BY queue",
                params![],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)),
            )
        })
    }

    /// The ids of every letter, oldest first (read a page at a time).
    pub fn all_ids(&self) -> Result<Vec<i64>> {
        let mut ids = Vec::new();
        let mut before = None;
        loop {
            let page = self.list(&Filter {
                pair: None,
                before_id: before,
                limit: 1000,
            })?;
            let Some(last) = page.last() else { break };
            before = Some(last.id);
            ids.extend(page.iter().map(|l| l.id));
        }
        ids.reverse();
        Ok(ids)
    }

    /// Every letter's count (for `slate deadletters`' summary).
    pub fn count(&self) -> Result<u64> {
        self.m.read(|c| {
            c.query_row("SELECT COUNT(*) FROM dead_letters", params![], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as u64)
        })
    }

    /// The pairs of the database as (id, source URL): where a retry routes letters.
    pub fn pair_sources(&self) -> Result<Vec<(i64, String)>> {
        self.m.read(|c| {
            c.query_map("SELECT id, src FROM pairs ORDER BY id", params![], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
        })
    }

    /// Stores what a retry made of letter `id` (its rows into the inbox, as any message's)
    /// and drops the letter, in one transaction; or, when `intake` still has dead letters,
    /// keeps the letter with its new reason. Returns false when the letter is gone (another
    /// retry or a purge took it).
    pub fn settle_retry(&self, id: i64, intake: &super::inbox::Intake) -> Result<bool> {
        let t = now_ms();
        let done = self.m.with(|c| {
            if !c.exists("SELECT 1 FROM dead_letters WHERE id = ?1", params![id])? {
                return Ok(false);
            }
            super::inbox::push_rows(c, intake, t)?;
            match intake.dead.first() {
                // still not usable: kept, with what the retry found
                Some(d) => c.execute(
                    "UPDATE dead_letters SET reason = ?2, pair_id = ?3 WHERE id = ?1",
                    params![id, d.reason, d.pair_id],
                )?,
                None => c.execute("DELETE FROM dead_letters WHERE id = ?1", params![id])?,
            };
            Ok(true)
        })?;
        if done {
            super::inbox::bell().notify_waiters();
        }
        Ok(done)
    }
}
