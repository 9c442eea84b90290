//! The durable event inbox (SQLite, in the manifest's database). Event sources push here and
//! only then acknowledge their cloud message (rule 2 of docs/ARCHITECTURE.md); the daemon takes pending keys,
//! reconciles each, and marks it done. Events for one key coalesce into one row, so duplicates
//! collapse and a burst on one key costs one reconcile. Unparseable messages go to a
//! dead-letter table with the raw text and the reason.

use super::db::{params, DbResult, OptionalExtension, Row};
use super::owner::{host_id, owner_alive, owner_tag};

use crate::core::error::Result;
use crate::state::manifest::Manifest;

/// What an event said happened (the reconciler checks the source anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Upsert = 0,
    Delete = 1,
}

/// One key's pending work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub key: String,
    pub kind: Kind,
    pub token: Option<String>,
    pub events: u64,
    /// When the first coalesced event arrived (unix ms): for the lag metric.
    pub first_seen: i64,
    /// The provider's time of the newest change an event named (unix ms), when events say.
    pub event_at: Option<i64>,
    pub attempts: u32,
    /// A held delete an operator released: it passes the delete brake.
    pub released: bool,
}

/// Counts for health lines and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub pending: u64,
    pub dead_letters: u64,
    /// When the oldest pending key's first event arrived (unix ms); held deletes, which wait
    /// for an operator, left out.
    pub oldest_ms: Option<i64>,
}

use super::clock::now_ms;

/// Rung after every push: a daemon waiting for work wakes at once instead of polling.
pub fn bell() -> &'static tokio::sync::Notify {
    static BELL: std::sync::OnceLock<tokio::sync::Notify> = std::sync::OnceLock::new();
    BELL.get_or_init(tokio::sync::Notify::new)
}

/// Stores one event for a key, coalescing with the key's pending row: the newest token wins,
/// but a row with any untokened event stays untokened (it must be applied whatever the tokens
/// say); a new event makes the key due at once and restarts its backoff.
pub(crate) const PUSH_SQL: &str =
    "INSERT INTO inbox (pair_id, key, kind, token, events, first_seen, last_seen, event_at)
     VALUES (?1, ?2, ?3, ?4, 1, ?5, ?5, ?6)
     ON CONFLICT (pair_id, key) DO UPDATE SET kind = excluded.kind,
        event_at = CASE WHEN excluded.event_at IS NULL THEN inbox.event_at
                        WHEN inbox.event_at IS NULL OR excluded.event_at > inbox.event_at
                        THEN excluded.event_at ELSE inbox.event_at END,
        token = CASE WHEN inbox.token IS NULL OR excluded.token IS NULL THEN NULL
                     WHEN excluded.token > inbox.token THEN excluded.token
                     ELSE inbox.token END,
        events = inbox.events + 1,
        last_seen = excluded.last_seen, not_before = 0, attempts = 0, held = 0";

/// Notes the first event of each kind of a canary key (`schema/sqlite/0014_canaries_freshness.sql`).
fn note_canary(c: &super::db::Conn, pair_id: i64, key: &str, kind: Kind, t: i64) -> DbResult<()> {
    if crate::core::canary::is_canary(key) {
        c.execute(
            "INSERT INTO canary_events (pair_id, key, kind, at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (pair_id, key, kind) DO NOTHING",
            params![pair_id, key, kind as i64, t],
        )?;
    }
    Ok(())
}

/// Stores the key rows (coalesced as [`Inbox::push`] does) and the prefixes to expand of
/// `intake`, in the caller's transaction (a message's, or a dead letter's retry).
pub(crate) fn push_rows(c: &super::db::Conn, intake: &Intake, t: i64) -> DbResult<()> {
    for (pair_id, key, kind, token, at) in &intake.rows {
        c.execute(PUSH_SQL, params![pair_id, key, *kind as i64, token, t, at])?;
        note_canary(c, *pair_id, key, *kind, t)?;
    }
    // a new event for a prefix being expanded starts it over (the folder may hold other keys
    // now): a new generation, due at once
    for (pair_id, prefix) in &intake.prefixes {
        c.execute(
            "INSERT INTO expansions (pair_id, prefix, created_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (pair_id, prefix) DO UPDATE SET phase = 0, cursor = '',
                generation = expansions.generation + 1, not_before = 0, attempts = 0,
                error = NULL",
            params![pair_id, prefix, t],
        )?;
    }
    Ok(())
}

/// One key of an [`Intake`]: (pair, key, kind, ordering token, the provider's change time).
pub type IntakeRow = (i64, String, Kind, Option<String>, Option<i64>);

/// What one batch of messages names, for every pair it feeds: stored by [`Inbox::store`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Intake {
    /// (pair, key relative to the pair's prefix, what happened, ordering token, the
    /// provider's time of the change in unix ms).
    pub rows: Vec<IntakeRow>,
    /// (pair, prefix to expand: relative, '' or ending with '/').
    pub prefixes: Vec<(i64, String)>,
    /// Messages kept as dead letters (one row per message).
    pub dead: Vec<DeadLetter>,
    /// (feed, cursor): where a log-like source (Azure's change feed) was read to, committed
    /// with the rows of the records before it (`schema/sqlite/0015_feed_cursors.sql`).
    pub cursor: Option<(String, String)>,
}

/// A message kept as a dead letter: stored once per message, whatever it held.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The pair it belongs to, if exactly one (an unaddressable key of that pair); `None` for
    /// a message of no pair (malformed, or naming a bucket no pair follows).
    pub pair_id: Option<i64>,
    /// The transport (`sqs`, `azqueue`, `pubsub`, `webhook-eventgrid`, …).
    pub source: String,
    /// The queue, subscription or webhook it came from (never a secret).
    pub queue: String,
    pub raw: Vec<u8>,
    /// The text the parser read, when the transport decoded it first (a Storage Queue's
    /// base64).
    pub decoded: Option<Vec<u8>>,
    /// One line, or several reasons joined by `; ` (at most `events::MAX_REASONS`).
    pub reason: String,
}

impl Intake {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
            && self.prefixes.is_empty()
            && self.dead.is_empty()
            && self.cursor.is_none()
    }
}

/// A prefix being expanded (see `schema/sqlite/0005_expansions.sql`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expansion {
    pub prefix: String,
    /// 0: listing the source; 1: the keys the manifest recorded under the prefix.
    pub phase: u8,
    /// Phase 0: the listing's next page token (a cloud store) or the last key pushed (a local
    /// folder); phase 1: the last key pushed.
    pub cursor: String,
    /// Grows when a new event restarts the expansion: a step moves only the row it read.
    pub generation: i64,
    /// Failed steps so far (each waits longer).
    pub attempts: u32,
}

/// The inbox of one database.
pub struct Inbox<'a> {
    m: &'a Manifest,
}

impl<'a> Inbox<'a> {
    pub fn new(m: &'a Manifest) -> Self {
        Inbox { m }
    }

    /// Stores events durably (one transaction). Returns how many rows were new keys.
    pub fn push(&self, pair_id: i64, events: &[(String, Kind, Option<String>)]) -> Result<u64> {
        let t = now_ms();
        self.m
            .with(|c| {
                let mut new = 0;
                for (key, kind, token) in events {
                    if !c.exists(
                        "SELECT 1 FROM inbox WHERE pair_id = ?1 AND key = ?2",
                        params![pair_id, key],
                    )? {
                        new += 1;
                    }
                    c.execute(
                        PUSH_SQL,
                        params![pair_id, key, *kind as i64, token, t, None::<i64>],
                    )?;
                    note_canary(c, pair_id, key, *kind, t)?;
                }
                Ok(new)
            })
            .inspect(|_| bell().notify_waiters())
    }

    /// Stores what one batch of messages names, for every pair, in one transaction: key rows
    /// (coalesced as [`Inbox::push`] does), prefixes to expand, and dead letters. Only after
    /// this returns may the messages be acknowledged.
    pub fn store(&self, intake: &Intake) -> Result<()> {
        if intake.is_empty() {
            return Ok(());
        }
        let t = now_ms();
        self.m
            .with(|c| {
                push_rows(c, intake, t)?;
                for d in &intake.dead {
                    c.execute(
                        "INSERT INTO dead_letters (pair_id, source, queue, raw, decoded, reason, received_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        params![d.pair_id, d.source, d.queue, d.raw, d.decoded, d.reason, t],
                    )?;
                }
                if let Some((feed, cursor)) = &intake.cursor {
                    c.execute(
                        "INSERT INTO feed_cursors (feed, cursor, updated_at) VALUES (?1, ?2, ?3)
                         ON CONFLICT (feed) DO UPDATE SET cursor = excluded.cursor,
                             updated_at = excluded.updated_at",
                        params![feed, cursor, t],
                    )?;
                }
                Ok(())
            })
            .inspect(|_| bell().notify_waiters())
    }

    /// Stores `cursor` as where `feed` starts unless one is stored already; returns the one
    /// stored (another worker's, when it came first).
    pub fn init_feed_cursor(&self, feed: &str, cursor: &str) -> Result<String> {
        let t = now_ms();
        self.m.with(|c| {
            c.execute(
                "INSERT INTO feed_cursors (feed, cursor, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (feed) DO NOTHING",
                params![feed, cursor, t],
            )?;
            c.query_row(
                "SELECT cursor FROM feed_cursors WHERE feed = ?1",
                params![feed],
                |r| r.get(0),
            )
        })
    }

    /// Where the log-like source `feed` was read to (see [`Intake::cursor`]); `None` before
    /// its first batch is stored.
    pub fn feed_cursor(&self, feed: &str) -> Result<Option<String>> {
        self.m.read(|c| {
            c.query_row(
                "SELECT cursor FROM feed_cursors WHERE feed = ?1",
                params![feed],
                |r| r.get(0),
            )
            .optional()
        })
    }

    /// When the first event of each kind of canary `key` was stored: (upsert, delete), unix ms.
    pub fn canary_events(&self, pair_id: i64, key: &str) -> Result<(Option<i64>, Option<i64>)> {
        let rows: Vec<(i64, i64)> = self.m.read(|c| {
            c.query_map(
                "SELECT kind, at FROM canary_events WHERE pair_id = ?1 AND key = ?2",
                params![pair_id, key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })?;
        let at = |k: Kind| rows.iter().find(|(x, _)| *x == k as i64).map(|(_, t)| *t);
        Ok((at(Kind::Upsert), at(Kind::Delete)))
    }

    /// Forgets the events of canary `key`, and those of any canary of the pair older than
    /// `stale_ms` (a check killed before it cleaned up).
    pub fn forget_canary(&self, pair_id: i64, key: &str, stale_ms: i64) -> Result<()> {
        let t = now_ms();
        self.m.with(|c| {
            c.execute(
                "DELETE FROM canary_events WHERE pair_id = ?1 AND (key = ?2 OR at < ?3)",
                params![pair_id, key, t - stale_ms],
            )
            .map(|_| ())
        })
    }

    /// The oldest expansion of a pair that is due now (a failed step waits its backoff).
    pub fn next_expansion(&self, pair_id: i64) -> Result<Option<Expansion>> {
        let t = now_ms();
        self.m.read(|c| {
            c.query_row(
                "SELECT prefix, phase, cursor, generation, attempts FROM expansions
                 WHERE pair_id = ?1 AND not_before <= ?2 ORDER BY not_before, created_at LIMIT 1",
                params![pair_id, t],
                |r| {
                    Ok(Expansion {
                        prefix: r.get(0)?,
                        phase: r.get::<_, i64>(1)? as u8,
                        cursor: r.get(2)?,
                        generation: r.get(3)?,
                        attempts: r.get::<_, i64>(4)? as u32,
                    })
                },
            )
            .optional()
        })
    }

    /// How many expansions a pair has pending (due or waiting).
    pub fn expansion_count(&self, pair_id: i64) -> Result<u64> {
        self.m.read(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM expansions WHERE pair_id = ?1",
                params![pair_id],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
        })
    }

    /// One durable step of the expansion `x` (as read): pushes `rows` for the pair and moves
    /// the expansion to (`phase`, `cursor`), or removes it when `finished`, in one
    /// transaction. If a new event restarted the expansion meanwhile (a newer generation), the
    /// rows are pushed all the same (more keys to look at is harmless) but the restarted row
    /// is left as it is, so the new event's expansion runs whole.
    pub fn expansion_step(
        &self,
        pair_id: i64,
        x: &Expansion,
        rows: &[(String, Kind, Option<String>)],
        phase: u8,
        cursor: &str,
        finished: bool,
    ) -> Result<()> {
        let t = now_ms();
        self.m
            .with(|c| {
                for (key, kind, token) in rows {
                    c.execute(
                        PUSH_SQL,
                        params![pair_id, key, *kind as i64, token, t, None::<i64>],
                    )?;
                    // a canary found by a folder's expansion arrived by its folder's event
                    note_canary(c, pair_id, key, *kind, t)?;
                }
                if finished {
                    c.execute(
                        "DELETE FROM expansions WHERE pair_id = ?1 AND prefix = ?2 AND generation = ?3",
                        params![pair_id, x.prefix, x.generation],
                    )?;
                } else {
                    c.execute(
                        "UPDATE expansions SET phase = ?4, cursor = ?5, attempts = 0, error = NULL
                         WHERE pair_id = ?1 AND prefix = ?2 AND generation = ?3",
                        params![pair_id, x.prefix, x.generation, phase as i64, cursor],
                    )?;
                }
                Ok(())
            })
            .inspect(|_| bell().notify_waiters())
    }

    /// A step of `x` failed: it waits `delay_ms` before the next try, with the reason kept.
    pub fn expansion_failed(
        &self,
        pair_id: i64,
        x: &Expansion,
        delay_ms: i64,
        error: &str,
    ) -> Result<()> {
        let t = now_ms();
        self.m.with(|c| {
            c.execute(
                "UPDATE expansions SET attempts = attempts + 1, not_before = ?4, error = ?5
                 WHERE pair_id = ?1 AND prefix = ?2 AND generation = ?3",
                params![pair_id, x.prefix, x.generation, t + delay_ms, error],
            )
            .map(|_| ())
        })
    }

    /// Up to `limit` keys ready to reconcile, oldest first.
    pub fn take(&self, pair_id: i64, limit: usize) -> Result<Vec<Pending>> {
        let t = now_ms();
        // read in the index's order (pair, first_seen, key): a take reads what it takes
        self.m.read(|c| {
            c.query_map(
                "SELECT key, kind, token, events, first_seen, attempts, held, event_at FROM inbox
                 WHERE pair_id = ?1 AND not_before <= ?2 ORDER BY first_seen, key LIMIT ?3",
                params![pair_id, t, limit as i64],
                pending_row,
            )
        })
    }

    /// Removes a reconciled key, unless an event arrived for it after it was taken (then it
    /// stays, to be reconciled again: that event may describe a newer state). `events` is the
    /// row's event count as `take` returned it: every push adds one, so a row with more events
    /// got some after the take, whatever the clock says.
    pub fn done(&self, pair_id: i64, key: &str, events: u64) -> Result<()> {
        self.m.with(|c| finish_key(c, pair_id, key, events, None))
    }

    /// Puts a key back with a backoff after a failed reconcile.
    pub fn retry_later(&self, pair_id: i64, key: &str, delay_ms: i64) -> Result<()> {
        self.retry(pair_id, key, delay_ms, None)
    }

    /// Puts a key back with a backoff, its claim given back; with `by`, only while that worker
    /// (or no one) holds it.
    fn retry(&self, pair_id: i64, key: &str, delay_ms: i64, by: Option<&str>) -> Result<()> {
        let t = now_ms();
        self.m
            .with_locking(|c| retry_key(c, pair_id, key, t + delay_ms, by))
    }

    /// Keeps an unparseable message with the reason.
    pub fn dead_letter(
        &self,
        pair_id: Option<i64>,
        source: &str,
        raw: &[u8],
        reason: &str,
    ) -> Result<()> {
        self.m.with(|c| {
            c.execute(
                "INSERT INTO dead_letters (pair_id, source, raw, reason, received_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![pair_id, source, raw, reason, now_ms()],
            )
            .map(|_| ())
        })
    }

    /// Drops dead letters older than `max_age_ms`; returns how many.
    pub fn prune_dead_letters(&self, max_age_ms: i64) -> Result<u64> {
        self.prune(
            "DELETE FROM dead_letters WHERE received_at < ?1",
            max_age_ms,
        )
    }

    pub fn stats(&self, pair_id: i64) -> Result<Stats> {
        self.m.read(|c| {
            let count = |sql: &str, p: &[super::db::Value]| -> super::db::DbResult<u64> {
                c.query_row(sql, p, |r| r.get::<_, i64>(0))
                    .map(|n| n as u64)
            };
            Ok(Stats {
                pending: count(
                    "SELECT COUNT(*) FROM inbox WHERE pair_id = ?1",
                    params![pair_id],
                )?,
                // the pair's own: a letter of no pair is counted under its queue
                // (`slate deadletters`, `slate_dead_letters_unowned`), never under every pair
                dead_letters: count(
                    "SELECT COUNT(*) FROM dead_letters WHERE pair_id = ?1",
                    params![pair_id],
                )?,
                oldest_ms: c.query_row(
                    "SELECT MIN(first_seen) FROM inbox WHERE pair_id = ?1 AND held <> 1",
                    params![pair_id],
                    |r| r.get::<_, Option<i64>>(0),
                )?,
            })
        })
    }
}

/// A worker that claims pending keys: one per daemon process, named by its process (PID and
/// start time, as leases are) and a random part, on its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    pub id: String,
    pub host: String,
}

impl Worker {
    /// This process as a worker.
    pub fn this_process() -> Worker {
        let me =
            owner_tag(std::process::id()).unwrap_or_else(|| format!("{}:0", std::process::id()));
        Worker {
            id: format!("{me}:{:08x}", fastrand::u32(..)),
            host: host_id(),
        }
    }
}

/// This process as a worker (one for all its pairs).
pub fn worker() -> &'static Worker {
    static ME: std::sync::OnceLock<Worker> = std::sync::OnceLock::new();
    ME.get_or_init(Worker::this_process)
}

/// How long a claim on a pending key lives unless its worker renews it
/// ([`Inbox::renew_claims`], every third of it): how soon a dead worker's keys pass to another
/// (`sync --claim-secs`; 150 s unless set: longer than the 60 s a worker waits out a
/// PostgreSQL outage).
static CLAIM_TTL_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(150_000);

/// Set while this process's claims may have lapsed (their renewals failed for longer than a
/// claim lives): the event loop takes no keys and drops the work in flight, since another
/// worker may have taken those keys over.
static CLAIMS_LAPSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process's claims may have lapsed (see [`set_claims_lapsed`]).
pub fn claims_lapsed() -> bool {
    CLAIMS_LAPSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Says whether this process's claims may have lapsed (set by the renewal loop).
pub fn set_claims_lapsed(lapsed: bool) {
    CLAIMS_LAPSED.store(lapsed, std::sync::atomic::Ordering::Relaxed);
}

/// Sets this process's claim lifetime (see [`claim_ttl`]).
pub fn set_claim_ttl(ttl: std::time::Duration) {
    let ms = i64::try_from(ttl.as_millis())
        .unwrap_or(i64::MAX)
        .max(1_000);
    CLAIM_TTL_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}

/// This process's claim lifetime.
pub fn claim_ttl() -> std::time::Duration {
    std::time::Duration::from_millis(CLAIM_TTL_MS.load(std::sync::atomic::Ordering::Relaxed) as u64)
}

fn claim_ttl_ms() -> i64 {
    CLAIM_TTL_MS.load(std::sync::atomic::Ordering::Relaxed)
}

/// What a worker did with a key it claimed, for [`Inbox::settle`] and the `applies` table.
#[derive(Debug, Clone)]
pub struct Apply<'a> {
    pub worker: &'a Worker,
    /// When the worker began the key (unix ms).
    pub started_at: i64,
    /// `copied`, `deleted`, `unchanged`, `failed`, …
    pub outcome: &'a str,
}

/// One row of the `applies` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub key: String,
    pub worker: String,
    pub host: String,
    pub started_at: i64,
    pub finished_at: i64,
    pub outcome: String,
}

/// Puts a key back, not before `not_before`, its claim given back; with `by`, only while that
/// worker (or no one) holds it.
fn retry_key(
    c: &super::db::Conn,
    pair_id: i64,
    key: &str,
    not_before: i64,
    by: Option<&str>,
) -> DbResult<()> {
    c.execute(
        "UPDATE inbox SET attempts = attempts + 1, not_before = ?3, claimed_by = NULL,
            claimed_host = NULL, claim_until = 0
         WHERE pair_id = ?1 AND key = ?2
           AND (CAST(?4 AS TEXT) IS NULL OR claimed_by IS NULL OR claimed_by = ?4)",
        params![pair_id, key, not_before, by],
    )
    .map(|_| ())
}

/// How a claimed key is settled after its reconcile ([`Inbox::settle_all`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Applied, or found equal: recorded in `applies` (`outcome`), its row removed unless
    /// events arrived meanwhile.
    Applied {
        key: String,
        events: u64,
        started_at: i64,
        outcome: String,
    },
    /// No retry can apply it: kept as a dead letter with `why`, then settled as applied.
    Dead {
        key: String,
        events: u64,
        started_at: i64,
        why: String,
    },
    /// Failed: back after `delay_ms`, its claim given back.
    Retry { key: String, delay_ms: i64 },
}

/// Removes a settled key's row unless events arrived for it meanwhile; then its claim is given
/// back (with `by`, only while that worker holds it), so that the key is applied again.
fn finish_key(
    c: &super::db::Conn,
    pair_id: i64,
    key: &str,
    events: u64,
    by: Option<&str>,
) -> DbResult<()> {
    // only by its holder: a worker whose claim lapsed (and another took the key over) must not
    // finish the key under the other's hands
    let gone = c.execute(
        "DELETE FROM inbox WHERE pair_id = ?1 AND key = ?2 AND events <= ?3
           AND (CAST(?4 AS TEXT) IS NULL OR claimed_by IS NULL OR claimed_by = ?4)",
        params![pair_id, key, events as i64, by],
    )?;
    if gone == 0 {
        c.execute(
            "UPDATE inbox SET claimed_by = NULL, claimed_host = NULL, claim_until = 0
             WHERE pair_id = ?1 AND key = ?2
               AND (CAST(?3 AS TEXT) IS NULL OR claimed_by = ?3)",
            params![pair_id, key, by],
        )?;
    }
    Ok(())
}

fn pending_row(r: &Row) -> DbResult<Pending> {
    Ok(Pending {
        key: r.get(0)?,
        kind: if r.get::<_, i64>(1)? == 1 {
            Kind::Delete
        } else {
            Kind::Upsert
        },
        token: r.get(2)?,
        events: r.get::<_, i64>(3)? as u64,
        first_seen: r.get(4)?,
        attempts: r.get::<_, i64>(5)? as u32,
        released: r.get::<_, i64>(6)? == 2,
        event_at: r.get(7)?,
    })
}

impl Inbox<'_> {
    /// Claims for `w` up to `limit` keys of the pair that are due and that no live claim
    /// holds, oldest first, until [`claim_ttl`] from now: competing workers on one database
    /// each get keys of their own (PostgreSQL skips the rows another worker is claiming at the
    /// same moment, `FOR UPDATE SKIP LOCKED`; SQLite has one writer at a time anyway).
    pub fn claim(&self, pair_id: i64, limit: usize, w: &Worker) -> Result<Vec<Pending>> {
        self.claim_at(pair_id, limit, w, now_ms(), claim_ttl_ms())
    }

    /// [`Inbox::claim`] as of `t` (unix ms), for `ttl_ms`.
    pub fn claim_at(
        &self,
        pair_id: i64,
        limit: usize,
        w: &Worker,
        t: i64,
        ttl_ms: i64,
    ) -> Result<Vec<Pending>> {
        let lock = if self.m.is_postgres() {
            " FOR UPDATE SKIP LOCKED"
        } else {
            ""
        };
        let sql = format!(
            "UPDATE inbox SET claimed_by = ?3, claimed_host = ?4, claim_until = ?5
             WHERE (pair_id, key) IN (
                SELECT pair_id, key FROM inbox
                WHERE pair_id = ?1 AND not_before <= ?2 AND claim_until <= ?2
                ORDER BY first_seen, key LIMIT ?6{lock})
             RETURNING key, kind, token, events, first_seen, attempts, held, event_at"
        );
        let mut rows = self.m.with_locking(|c| {
            c.query_map(
                &sql,
                params![pair_id, t, w.id, w.host, t + ttl_ms, limit as i64],
                pending_row,
            )
        })?;
        rows.sort_by(|a, b| (a.first_seen, &a.key).cmp(&(b.first_seen, &b.key)));
        Ok(rows)
    }

    /// Pushes the expiry of every claim `w` holds to [`claim_ttl`] from now; returns how
    /// many it holds.
    pub fn renew_claims(&self, w: &Worker) -> Result<u64> {
        let until = now_ms() + claim_ttl_ms();
        self.m.with_locking(|c| {
            c.execute(
                "UPDATE inbox SET claim_until = ?2 WHERE claimed_by = ?1",
                params![w.id, until],
            )
            .map(|n| n as u64)
        })
    }

    /// Frees the claims of workers on `host` whose process is gone (a worker killed and
    /// started again there), without waiting for them to expire; returns how many.
    pub fn release_dead_claims(&self, host: &str) -> Result<u64> {
        let owners: Vec<String> = self.m.read(|c| {
            c.query_map(
                "SELECT DISTINCT claimed_by FROM inbox WHERE claimed_by IS NOT NULL
                 AND (claimed_host = ?1 OR claimed_host = ?2)",
                // ?2: the plain host name rows of an earlier slate hold
                params![host, super::owner::host_label(host)],
                |r| r.get(0),
            )
        })?;
        let mut freed = 0;
        for o in owners.into_iter().filter(|o| !owner_alive(o)) {
            freed += self.m.with_locking(|c| {
                c.execute(
                    "UPDATE inbox SET claimed_by = NULL, claimed_host = NULL, claim_until = 0
                     WHERE claimed_by = ?1",
                    params![o],
                )
            })? as u64;
        }
        Ok(freed)
    }

    /// Settles a key `a.worker` claimed and applied, in one transaction: records who applied
    /// it and when, then removes its row as [`Inbox::done`] does, or, when events arrived
    /// for it meanwhile, frees the claim so that the key is applied again.
    pub fn settle(&self, pair_id: i64, key: &str, events: u64, a: &Apply) -> Result<()> {
        let one = Settle::Applied {
            key: key.to_string(),
            events,
            started_at: a.started_at,
            outcome: a.outcome.to_string(),
        };
        self.settle_all(pair_id, a.worker, std::slice::from_ref(&one))
    }

    /// Settles the keys `w` claimed and reconciled, all in one transaction (a daemon settles
    /// what finished together, so that the state is not written once per key): applied keys
    /// as [`Inbox::settle`], keys no retry can apply kept as dead letters too, failed ones put
    /// back with their backoff ([`Inbox::retry_later_by`]).
    pub fn settle_all(&self, pair_id: i64, w: &Worker, items: &[Settle]) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let t = now_ms();
        self.m.with_locking(|c| {
            for s in items {
                let (key, events, started_at, outcome) = match s {
                    Settle::Retry { key, delay_ms } => {
                        retry_key(c, pair_id, key, t + delay_ms, Some(&w.id))?;
                        continue;
                    }
                    Settle::Dead {
                        key,
                        events,
                        started_at,
                        why,
                    } => {
                        c.execute(
                            "INSERT INTO dead_letters (pair_id, source, raw, reason, received_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                            params![pair_id, "apply", key.as_bytes(), why, t],
                        )?;
                        (key, events, started_at, "dead-lettered")
                    }
                    Settle::Applied {
                        key,
                        events,
                        started_at,
                        outcome,
                    } => (key, events, started_at, outcome.as_str()),
                };
                c.execute(
                    "INSERT INTO applies (pair_id, key, worker, host, started_at, finished_at, outcome)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![pair_id, key, w.id, w.host, started_at, t, outcome],
                )?;
                finish_key(c, pair_id, key, *events, Some(&w.id))?;
            }
            Ok(())
        })
    }

    /// The `applies` rows of a pair, by key and start (tests, and an operator's questions).
    pub fn applies(&self, pair_id: i64) -> Result<Vec<Applied>> {
        self.m.read(|c| {
            c.query_map(
                "SELECT key, worker, host, started_at, finished_at, outcome FROM applies
                 WHERE pair_id = ?1 ORDER BY key, started_at",
                params![pair_id],
                |r| {
                    Ok(Applied {
                        key: r.get(0)?,
                        worker: r.get(1)?,
                        host: r.get(2)?,
                        started_at: r.get(3)?,
                        finished_at: r.get(4)?,
                        outcome: r.get(5)?,
                    })
                },
            )
        })
    }

    /// Gives back the claims `w` holds on keys of the pair (its loop ended: a failure or a
    /// shutdown); returns how many.
    pub fn release_claims(&self, pair_id: i64, w: &Worker) -> Result<u64> {
        self.m.with_locking(|c| {
            c.execute(
                "UPDATE inbox SET claimed_by = NULL, claimed_host = NULL, claim_until = 0
                 WHERE pair_id = ?1 AND claimed_by = ?2",
                params![pair_id, w.id],
            )
            .map(|n| n as u64)
        })
    }

    /// [`Inbox::retry_later`] for a key `w` claimed: its claim is given back, unless another
    /// worker holds the key now (its claim expired and was taken).
    pub fn retry_later_by(&self, pair_id: i64, key: &str, delay_ms: i64, w: &Worker) -> Result<()> {
        self.retry(pair_id, key, delay_ms, Some(&w.id))
    }

    /// Drops `applies` rows older than `max_age_ms`; returns how many.
    pub fn prune_applies(&self, max_age_ms: i64) -> Result<u64> {
        self.prune("DELETE FROM applies WHERE finished_at < ?1", max_age_ms)
    }

    /// Runs a `DELETE … WHERE time < ?1` with now less `max_age_ms`; returns how many went.
    fn prune(&self, sql: &str, max_age_ms: i64) -> Result<u64> {
        let t = now_ms();
        self.m
            .with(|c| c.execute(sql, params![t - max_age_ms]).map(|n| n as u64))
    }
}

/// Milliseconds now (what `done` compares with).
pub fn now() -> i64 {
    now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::db::testing::conformance;
    use crate::state::db::Location;

    conformance!(
        events_coalesce_per_key_and_survive_reopening,
        claims_give_each_key_to_one_worker_until_they_expire,
        concurrent_claims_never_share_a_key,
        a_key_is_finished_only_by_its_holder,
        the_brake_holds_only_the_delete_it_was_asked_about,
        keys_finished_together_are_settled_in_one_go,
        event_times_keep_the_newest_and_every_path_stores_keys
    );

    /// A key's pending row keeps the newest time an event gave (an event without one keeps
    /// it); keys pushed by a folder's expansion and canary events are stored too.
    fn event_times_keep_the_newest_and_every_path_stores_keys(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let p = m.pair("s3://a", "s3://times").unwrap().id;
        let ib = Inbox::new(&m);
        let row = |k: &str, kind: Kind, at: Option<i64>| (p, k.to_string(), kind, None, at);
        let intake = Intake {
            rows: vec![
                row("k", Kind::Upsert, Some(2_000)),
                row("k", Kind::Upsert, Some(1_000)),
                row("k", Kind::Upsert, None),
                row("n", Kind::Upsert, None),
                row(".slate-canary/c", Kind::Upsert, Some(5)),
                row(".slate-canary/c", Kind::Delete, None),
            ],
            prefixes: vec![(p, "d/".into())],
            ..Default::default()
        };
        ib.store(&intake).unwrap();
        let got = ib.take(p, 10).unwrap();
        let at = |k: &str| got.iter().find(|x| x.key == k).map(|x| x.event_at);
        assert_eq!(at("k"), Some(Some(2_000)));
        assert_eq!(at("n"), Some(None));
        let (up, del) = ib.canary_events(p, ".slate-canary/c").unwrap();
        assert!(up.is_some() && del.is_some(), "{up:?} {del:?}");
        ib.forget_canary(p, ".slate-canary/c", 86_400_000).unwrap();
        assert_eq!(
            ib.canary_events(p, ".slate-canary/c").unwrap(),
            (None, None)
        );
        // a step of the folder's expansion stores what it found
        let x = ib.next_expansion(p).unwrap().expect("the expansion");
        ib.expansion_step(
            p,
            &x,
            &[("d/found".into(), Kind::Upsert, None)],
            0,
            "",
            true,
        )
        .unwrap();
        assert!(
            ib.take(p, 10).unwrap().iter().any(|x| x.key == "d/found"),
            "the expansion's key is pending"
        );
    }

    /// A daemon settles what finished together in one transaction: applied keys go (unless
    /// an event came meanwhile: then they are freed for another reconcile), a key no retry
    /// can apply is a dead letter naming it, a failed key waits its backoff; each as alone.
    fn keys_finished_together_are_settled_in_one_go(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let p = m.pair("s3://a", "s3://many").unwrap().id;
        let ib = Inbox::new(&m);
        let names = ["copied", "again", "bad", "failed", "other"];
        let events: Vec<(String, Kind, Option<String>)> = names
            .iter()
            .map(|k| (k.to_string(), Kind::Upsert, None))
            .collect();
        ib.push(p, &events).unwrap();
        let t = now_ms();
        let (w, other) = (worker("1:1:a"), worker("2:2:b"));
        let mine = ib.claim_at(p, 4, &w, t, 60_000).unwrap();
        assert_eq!(mine.len(), 4);
        let theirs = ib.claim_at(p, 4, &other, t, 60_000).unwrap();
        assert_eq!(keys(&theirs), ["other"]);
        // "again" gets an event while it is applied
        ib.push(p, &[("again".into(), Kind::Upsert, None)]).unwrap();
        let ev = |k: &str| mine.iter().find(|p| p.key == k).unwrap().events;
        let applied = |k: &str| Settle::Applied {
            key: k.into(),
            events: ev(k),
            started_at: t,
            outcome: "copied".into(),
        };
        let settles = vec![
            applied("copied"),
            applied("again"),
            Settle::Dead {
                key: "bad".into(),
                events: ev("bad"),
                started_at: t,
                why: "cannot be addressed".into(),
            },
            Settle::Retry {
                key: "failed".into(),
                delay_ms: 60_000,
            },
            // not this worker's: settling it changes nothing
            Settle::Applied {
                key: "other".into(),
                events: 1,
                started_at: t,
                outcome: "copied".into(),
            },
        ];
        ib.settle_all(p, &w, &settles).unwrap();
        // left: "again" (a newer event, free to claim now), "failed" (after its backoff),
        // "other" (b's)
        assert_eq!(ib.stats(p).unwrap().pending, 3);
        let now = ib.claim_at(p, 10, &w, t + 1, 120_000).unwrap();
        assert_eq!(keys(&now), ["again"]);
        let later = ib
            .claim_at(p, 10, &worker("3:3:c"), t + 61_000, 60_000)
            .unwrap();
        assert_eq!(keys(&later), ["failed", "other"]);
        assert_eq!(later[0].attempts, 1);
        let letters = crate::state::deadletters::DeadLetters::new(&m)
            .list(&Default::default())
            .unwrap();
        assert!(
            letters
                .iter()
                .any(|l| l.pair_id == Some(p) && l.raw == b"bad" && l.reason.contains("addressed")),
            "{letters:?}"
        );
        let outcomes: Vec<(String, String)> = ib
            .applies(p)
            .unwrap()
            .into_iter()
            .map(|a| (a.key, a.outcome))
            .collect();
        assert_eq!(
            outcomes,
            [
                ("again".to_string(), "copied".to_string()),
                ("bad".into(), "dead-lettered".into()),
                ("copied".into(), "copied".into()),
                ("other".into(), "copied".into()),
            ]
        );
    }

    /// A delete the brake holds stays held; one that got a new event while it was being
    /// judged (the object made again) is given back to be applied, not held for an operator.
    fn the_brake_holds_only_the_delete_it_was_asked_about(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let p = m.pair("s3://a", "s3://held").unwrap().id;
        let ib = Inbox::new(&m);
        let b = crate::state::brake::Brakes::new(&m);
        ib.push(
            p,
            &[
                ("gone".into(), Kind::Delete, None),
                ("back".into(), Kind::Delete, None),
            ],
        )
        .unwrap();
        let t = now_ms();
        let w = worker("1:1:a");
        let mine = ib.claim_at(p, 2, &w, t, 60_000).unwrap();
        assert_eq!(mine.len(), 2);
        // "back" is written again at the source while its delete is judged
        ib.push(p, &[("back".into(), Kind::Upsert, None)]).unwrap();
        for k in &mine {
            b.hold(p, &k.key, k.events, &w.id).unwrap();
        }
        let due = ib.claim_at(p, 10, &worker("2:2:b"), t + 1, 60_000).unwrap();
        assert_eq!(keys(&due), ["back"], "the upsert is due, the delete held");
    }

    /// A worker whose claim lapsed (another took the key over) cannot finish the key under
    /// the other's hands.
    fn a_key_is_finished_only_by_its_holder(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let p = m.pair("s3://a", "s3://fin").unwrap().id;
        let ib = Inbox::new(&m);
        ib.push(p, &[("k".into(), Kind::Upsert, None)]).unwrap();
        let t = now_ms();
        let (a, b) = (worker("1:1:a"), worker("2:2:b"));
        let mine = ib.claim_at(p, 1, &a, t, 1_000).unwrap();
        assert_eq!(keys(&mine), ["k"]);
        // a's claim lapses; b takes the key over
        assert_eq!(
            keys(&ib.claim_at(p, 1, &b, t + 2_000, 1_000).unwrap()),
            ["k"]
        );
        let late = Apply {
            worker: &a,
            started_at: t,
            outcome: "copied",
        };
        ib.settle(p, "k", mine[0].events, &late).unwrap();
        assert_eq!(ib.stats(p).unwrap().pending, 1, "a did not finish b's key");
        let holder = Apply {
            worker: &b,
            started_at: t,
            outcome: "copied",
        };
        ib.settle(p, "k", mine[0].events, &holder).unwrap();
        assert_eq!(ib.stats(p).unwrap().pending, 0);
    }

    fn worker(id: &str) -> Worker {
        Worker {
            id: id.into(),
            host: "h1".into(),
        }
    }

    fn keys(p: &[Pending]) -> Vec<&str> {
        p.iter().map(|p| p.key.as_str()).collect()
    }

    fn claims_give_each_key_to_one_worker_until_they_expire(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let p = m.pair("s3://a", "s3://b").unwrap().id;
        let ib = Inbox::new(&m);
        let evs: Vec<_> = (0..5)
            .map(|i| (format!("k{i}"), Kind::Upsert, None))
            .collect();
        ib.push(p, &evs).unwrap();
        let t = now_ms();
        let (a, b) = (worker("1:1:a"), worker("2:2:b"));
        let got_a = ib.claim_at(p, 3, &a, t, 1_000).unwrap();
        let got_b = ib.claim_at(p, 3, &b, t, 1_000).unwrap();
        assert_eq!(keys(&got_a), ["k0", "k1", "k2"]);
        assert_eq!(keys(&got_b), ["k3", "k4"], "a's claims are not b's");
        assert!(ib.claim_at(p, 3, &b, t + 500, 1_000).unwrap().is_empty());
        // a settles k0 (recorded), and k1 got a new event while a held it: it stays, free
        ib.push(p, &[("k1".into(), Kind::Delete, None)]).unwrap();
        for k in &got_a[..2] {
            let apply = Apply {
                worker: &a,
                started_at: t,
                outcome: "copied",
            };
            ib.settle(p, &k.key, k.events, &apply).unwrap();
        }
        let again = ib.claim_at(p, 10, &b, t + 600, 1_000).unwrap();
        assert_eq!(keys(&again), ["k1"], "the key with a newer event, freed");
        assert_eq!(again[0].kind, Kind::Delete);
        // nobody renews: at expiry a's last claim (k2) passes to b, with b's own
        assert_eq!(
            keys(&ib.claim_at(p, 10, &b, t + 1_000, 1_000).unwrap()),
            ["k2", "k3", "k4"]
        );
        // a failed key waits its backoff, unclaimed
        ib.retry_later(p, "k3", 60_000).unwrap();
        assert!(ib
            .claim_at(p, 10, &a, t + 2_500, 1_000)
            .unwrap()
            .iter()
            .all(|x| x.key != "k3"));
        let applied = ib.applies(p).unwrap();
        assert_eq!(
            applied
                .iter()
                .map(|x| (x.key.as_str(), x.worker.as_str(), x.outcome.as_str()))
                .collect::<Vec<_>>(),
            [("k0", "1:1:a", "copied"), ("k1", "1:1:a", "copied")]
        );
        assert!(applied
            .iter()
            .all(|x| x.host == "h1" && x.finished_at >= x.started_at));
        assert_eq!(ib.prune_applies(-1_000).unwrap(), 2);
        // a dead worker's claims on this host are freed at once; a live one's stay
        let me = Worker::this_process();
        ib.push(
            p,
            &[
                ("k9".into(), Kind::Upsert, None),
                ("k8".into(), Kind::Upsert, None),
            ],
        )
        .unwrap();
        let t = now_ms();
        let dead = Worker {
            id: "4194304:1:dead".into(),
            host: me.host.clone(),
        };
        assert_eq!(ib.claim_at(p, 1, &dead, t, 60_000).unwrap().len(), 1);
        assert_eq!(ib.claim_at(p, 1, &me, t, 60_000).unwrap().len(), 1);
        assert_eq!(ib.release_dead_claims(&me.host).unwrap(), 1);
        // a worker whose pair loop ended gives its claims back (not renewed for good)
        assert_eq!(ib.release_claims(p, &me).unwrap(), 1);
        assert_eq!(
            ib.claim_at(p, 10, &a, t, 60_000).unwrap().len(),
            2,
            "both free again"
        );
        ib.release_claims(p, &a).unwrap();
        assert_eq!(ib.renew_claims(&a).unwrap(), 0, "a holds nothing now");
        // a key's failure gives its claim back only for its holder
        let key = ib.claim_at(p, 1, &a, t, 60_000).unwrap()[0].key.clone();
        ib.retry_later_by(p, &key, 0, &b).unwrap();
        let later = now_ms() + 10;
        let by_b = ib.claim_at(p, 100, &b, later, 60_000).unwrap();
        assert!(by_b.iter().all(|x| x.key != key), "a still holds {key}");
        ib.retry_later_by(p, &key, 0, &a).unwrap();
        let again = ib.claim_at(p, 100, &me, now_ms() + 10, 60_000).unwrap();
        assert!(
            again.iter().any(|x| x.key == key),
            "given back by a: {again:?}"
        );
    }

    fn concurrent_claims_never_share_a_key(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let p = m.pair("s3://a", "s3://b").unwrap().id;
        let evs: Vec<_> = (0..600)
            .map(|i| (format!("k{i:04}"), Kind::Upsert, None))
            .collect();
        Inbox::new(&m).push(p, &evs).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|n| {
                let loc = loc.clone();
                std::thread::spawn(move || {
                    // each thread its database of its own (connections, a pool), as separate
                    // workers have
                    let m = Manifest::open_at(&loc).unwrap();
                    let w = worker(&format!("{n}:{n}:w"));
                    let mut mine = Vec::new();
                    loop {
                        let got = Inbox::new(&m).claim(p, 7, &w).unwrap();
                        if got.is_empty() {
                            return mine;
                        }
                        mine.extend(got.into_iter().map(|x| x.key));
                    }
                })
            })
            .collect();
        let mut all: Vec<String> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!((n, all.len()), (600, 600), "every key claimed once");
    }

    fn events_coalesce_per_key_and_survive_reopening(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let p = m.pair("a", "b").unwrap().id;
        let ib = Inbox::new(&m);
        let new = ib
            .push(
                p,
                &[
                    ("k1".into(), Kind::Upsert, Some("01".into())),
                    ("k1".into(), Kind::Upsert, None),
                    ("k2".into(), Kind::Delete, None),
                    ("k1".into(), Kind::Delete, Some("02".into())),
                    ("k1".into(), Kind::Upsert, Some("01".into())), // late: the newest token stays
                    ("k3".into(), Kind::Upsert, Some("05".into())),
                    ("k3".into(), Kind::Upsert, Some("07".into())),
                ],
            )
            .unwrap();
        assert_eq!(new, 3);
        drop(m);
        let m = Manifest::open_at(loc).unwrap();
        let ib = Inbox::new(&m);
        let got = ib.take(p, 10).unwrap();
        assert_eq!(got.len(), 3);
        let k = |key: &str| got.iter().find(|x| x.key == key).unwrap().clone();
        // an untokened event (a watch, a folder, S3 without sequencers) is never outranked
        // by a token: the row must be applied whatever the tokens say
        assert_eq!((k("k1").token, k("k1").events), (None, 4));
        assert_eq!((k("k3").token.as_deref(), k("k3").events), (Some("07"), 2));
        ib.done(p, "k2", k("k2").events).unwrap();
        ib.done(p, "k3", k("k3").events).unwrap();
        // an event after the take keeps k1 pending, even within the same millisecond
        ib.push(p, &[("k1".into(), Kind::Upsert, None)]).unwrap();
        ib.done(p, "k1", k("k1").events).unwrap();
        assert_eq!(ib.take(p, 10).unwrap().len(), 1);
        ib.retry_later(p, "k1", 60_000).unwrap();
        assert!(ib.take(p, 10).unwrap().is_empty(), "backoff hides the key");
        ib.retry_later(p, "k1", 60_000).unwrap();
        // a new event is new information: the key is due at once and its backoff starts over
        ib.push(p, &[("k1".into(), Kind::Upsert, None)]).unwrap();
        let again = ib.take(p, 10).unwrap();
        assert_eq!((again.len(), again[0].attempts), (1, 0), "{again:?}");
        ib.retry_later(p, "k1", 60_000).unwrap();
        assert!(ib.take(p, 10).unwrap().is_empty());
        ib.dead_letter(Some(p), "sqs", b"{not json", "malformed JSON")
            .unwrap();
        // the oldest pending key: k1, since its first event (a backoff does not make it younger)
        assert_eq!(
            ib.stats(p).unwrap(),
            Stats {
                pending: 1,
                dead_letters: 1,
                oldest_ms: Some(again[0].first_seen),
            }
        );
    }
}
