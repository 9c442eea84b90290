//! The daemon's delete brake, in the shared state so that every worker of a pair brakes
//! together: the deletes a pair applies are counted in a sliding window; a delete that would
//! pass the pair's limit engages the brake, and from then on the pair's deletes are held in
//! its inbox until an operator releases or drops them (`slate pairs release-deletes`). The
//! policy is [`crate::core::brake::BrakePolicy`].

use super::clock::now_ms;
use super::db::{params, OptionalExtension};
use crate::core::brake::BrakePolicy;
use crate::core::error::Result;
use crate::state::manifest::Manifest;

/// `not_before` of a held row: never due.
pub const HELD_NOT_BEFORE: i64 = i64::MAX;

/// What the brake says of one delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    /// Apply it (counted: `id` refunds it when the object was not there after all).
    Yes { id: i64 },
    /// Hold it: the brake is engaged (`fresh`: by this very delete).
    Held { fresh: bool },
    /// A new window starts with this delete: ask again with the source's object count.
    NeedBase,
}

/// A pair's brake as the API and `slate pairs` show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BrakeState {
    pub engaged: bool,
    /// Unix ms it engaged.
    pub since: Option<i64>,
    pub reason: Option<String>,
    /// Deletes held in the inbox.
    pub held: u64,
    /// Deletes admitted in the current window.
    pub in_window: u64,
}

/// The brake released: not engaged, a new window from `t`, nothing counted in it.
fn reset(c: &super::db::Conn, pair_id: i64, t: i64) -> super::db::DbResult<()> {
    c.execute(
        "UPDATE delete_brakes SET engaged_at = NULL, reason = NULL, window_start = ?2
         WHERE pair_id = ?1",
        params![pair_id, t],
    )?;
    c.execute(
        "DELETE FROM brake_deletes WHERE pair_id = ?1",
        params![pair_id],
    )?;
    Ok(())
}

/// The brake of one database.
pub struct Brakes<'a> {
    m: &'a Manifest,
}

impl<'a> Brakes<'a> {
    pub fn new(m: &'a Manifest) -> Self {
        Brakes { m }
    }

    /// The objects the manifest holds for the pair's source (the window's base).
    pub fn source_objects(&self, pair_id: i64) -> Result<u64> {
        self.m.read(|c| {
            c.query_row(
                "SELECT COUNT(s_size) FROM entries WHERE pair_id = ?1",
                params![pair_id],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
        })
    }

    /// Admits one delete of the pair under `policy`, or holds it. When a new window starts
    /// with it, the answer is [`Admit::NeedBase`] unless `base_now` (the pair's source object
    /// count, read outside the transaction) is given: it becomes the window's base.
    pub fn admit(
        &self,
        pair_id: i64,
        policy: &BrakePolicy,
        base_now: Option<u64>,
    ) -> Result<Admit> {
        let t = now_ms();
        let window = policy.window.as_millis() as i64;
        self.m.with(|c| {
            c.execute(
                "INSERT INTO delete_brakes (pair_id, window_start, window_base) VALUES (?1, 0, 0)
                 ON CONFLICT (pair_id) DO NOTHING",
                params![pair_id],
            )?;
            let (engaged, start, base): (Option<i64>, i64, i64) = c.query_row(
                "SELECT engaged_at, window_start, window_base FROM delete_brakes WHERE pair_id = ?1",
                params![pair_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            if engaged.is_some() {
                return Ok(Admit::Held { fresh: false });
            }
            let since = t - window;
            let in_window: i64 = c.query_row(
                "SELECT COUNT(*) FROM brake_deletes WHERE pair_id = ?1 AND at > ?2",
                params![pair_id, since],
                |r| r.get(0),
            )?;
            // a quiet window: a new one starts, based on what the source holds now
            let base = if in_window == 0 && start <= since {
                let Some(base_now) = base_now else {
                    return Ok(Admit::NeedBase);
                };
                c.execute(
                    "UPDATE delete_brakes SET window_start = ?2, window_base = ?3 WHERE pair_id = ?1",
                    params![pair_id, t, base_now as i64],
                )?;
                base_now
            } else {
                base.max(0) as u64
            };
            if !policy.allows(in_window as u64 + 1, base) {
                let reason = format!(
                    "{} deletes within {} would pass the limit of {} ({} of {base} objects)",
                    in_window + 1,
                    crate::core::units::human_duration(policy.window),
                    policy.limit(base),
                    policy.text()
                );
                c.execute(
                    "UPDATE delete_brakes SET engaged_at = ?2, reason = ?3 WHERE pair_id = ?1",
                    params![pair_id, t, reason],
                )?;
                return Ok(Admit::Held { fresh: true });
            }
            let id: i64 = c.query_row(
                "INSERT INTO brake_deletes (pair_id, at) VALUES (?1, ?2) RETURNING id",
                params![pair_id, t],
                |r| r.get(0),
            )?;
            Ok(Admit::Yes { id })
        })
    }

    /// Takes back an admitted delete that deleted nothing (the object was not there).
    pub fn refund(&self, id: i64) -> Result<()> {
        self.m.with(|c| {
            c.execute("DELETE FROM brake_deletes WHERE id = ?1", params![id])
                .map(|_| ())
        })
    }

    /// Holds a delete in the inbox (its claim given back): never due until released. Only
    /// the row as `events` counted it when taken, and only while `by` (this worker) holds
    /// it: an event that came meanwhile (the object made again) may make it an upsert, which
    /// must not wait for an operator; the row is then given back to be applied again.
    pub fn hold(&self, pair_id: i64, key: &str, events: u64, by: &str) -> Result<()> {
        self.m.with(|c| {
            let held = c.execute(
                "UPDATE inbox SET held = 1, not_before = ?3, claimed_by = NULL, claimed_host = NULL,
                    claim_until = 0
                 WHERE pair_id = ?1 AND key = ?2 AND events <= ?4
                   AND (claimed_by IS NULL OR claimed_by = ?5)",
                params![pair_id, key, HELD_NOT_BEFORE, events as i64, by],
            )?;
            if held == 0 {
                c.execute(
                    "UPDATE inbox SET claimed_by = NULL, claimed_host = NULL, claim_until = 0
                     WHERE pair_id = ?1 AND key = ?2 AND claimed_by = ?3",
                    params![pair_id, key, by],
                )?;
            }
            Ok(())
        })
    }

    /// Releases the pair's held deletes (each due at once, let past the brake) and the brake
    /// (a new window starts); returns how many deletes were held.
    pub fn release(&self, pair_id: i64) -> Result<u64> {
        let t = now_ms();
        let n = self.m.with(|c| {
            let n = c.execute(
                "UPDATE inbox SET held = 2, not_before = 0 WHERE pair_id = ?1 AND held = 1",
                params![pair_id],
            )?;
            reset(c, pair_id, t)?;
            Ok(n as u64)
        })?;
        super::inbox::bell().notify_waiters();
        Ok(n)
    }

    /// Drops the pair's held deletes (the destination keeps those objects) and releases the
    /// brake; returns how many were dropped.
    pub fn drop_held(&self, pair_id: i64) -> Result<u64> {
        let t = now_ms();
        self.m.with(|c| {
            let n = c.execute(
                "DELETE FROM inbox WHERE pair_id = ?1 AND held = 1",
                params![pair_id],
            )?;
            reset(c, pair_id, t)?;
            Ok(n as u64)
        })
    }

    /// The pair's brake now (`window`: the policy's window, for the count).
    pub fn state(&self, pair_id: i64, window: std::time::Duration) -> Result<BrakeState> {
        let since = now_ms() - window.as_millis() as i64;
        self.m.read(|c| {
            let row: Option<(Option<i64>, Option<String>)> = c
                .query_row(
                    "SELECT engaged_at, reason FROM delete_brakes WHERE pair_id = ?1",
                    params![pair_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let held: i64 = c.query_row(
                "SELECT COUNT(*) FROM inbox WHERE pair_id = ?1 AND held = 1",
                params![pair_id],
                |r| r.get(0),
            )?;
            let in_window: i64 = c.query_row(
                "SELECT COUNT(*) FROM brake_deletes WHERE pair_id = ?1 AND at > ?2",
                params![pair_id, since],
                |r| r.get(0),
            )?;
            let (since, reason) = row.unwrap_or((None, None));
            Ok(BrakeState {
                engaged: since.is_some(),
                since,
                reason,
                held: held as u64,
                in_window: in_window as u64,
            })
        })
    }

    /// Drops window counts older than a day (the longest window worth keeping).
    pub fn prune(&self) -> Result<()> {
        let before = now_ms() - 86_400_000;
        self.m.with(|c| {
            c.execute("DELETE FROM brake_deletes WHERE at < ?1", params![before])
                .map(|_| ())
        })
    }
}
