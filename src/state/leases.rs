//! Leases (schema 0006): one holder at a time for a name (`pair:ID`), with an expiry the
//! holder pushes forward while it works. A lease whose holder ran on this host and whose
//! process is gone is free at once; one held elsewhere is free when it expires.

use super::db::{params, Conn, DbResult, OptionalExtension, Row};

use super::manifest::Manifest;
use super::owner::owner_alive;
use crate::core::error::Result;

/// Who holds a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub owner: String,
    pub host: String,
    pub pid: u32,
    pub purpose: String,
    /// Unix milliseconds.
    pub acquired_at: i64,
    pub expires_at: i64,
}

const HOLDER_SQL: &str =
    "SELECT owner, host, pid, purpose, acquired_at, expires_at FROM leases WHERE name = ?1";

fn holder_row(r: &Row) -> DbResult<Holder> {
    Ok(Holder {
        owner: r.get(0)?,
        host: r.get(1)?,
        pid: r.get::<_, i64>(2)? as u32,
        purpose: r.get(3)?,
        acquired_at: r.get(4)?,
        expires_at: r.get(5)?,
    })
}

/// Whether `h` still holds its lease for a taker on `host` at `now_ms`.
pub(crate) fn holds(h: &Holder, host: &str, now_ms: i64) -> bool {
    if super::owner::same_host(&h.host, host) {
        // on this host the holder's process can be asked: gone (killed with -9) holds
        // nothing; alive holds it, expired or not (a process stopped for a while, or a
        // renewal held up behind a long write, still works on it)
        owner_alive(&h.owner)
    } else {
        h.expires_at > now_ms
    }
}

/// The holders of the leases whose names start with `prefix` (`pair:1/`: those under it).
pub(crate) fn holders_under(c: &Conn, prefix: &str) -> DbResult<Vec<Holder>> {
    c.query_map(
        "SELECT owner, host, pid, purpose, acquired_at, expires_at FROM leases
         WHERE substr(name, 1, ?2) = ?1",
        params![prefix, prefix.chars().count() as i64],
        holder_row,
    )
}

/// The names `name` lies under: `pair:1` and `pair:1/run:4` for `pair:1/run:4/part:2`.
fn ancestors(name: &str) -> Vec<&str> {
    name.match_indices('/').map(|(i, _)| &name[..i]).collect()
}

/// [`Leases::acquire`] inside a transaction the caller holds (a partition is taken together
/// with its lease).
pub(crate) fn acquire_in(
    c: &Conn,
    name: &str,
    owner: &str,
    host: &str,
    purpose: &str,
    now_ms: i64,
    ttl_ms: i64,
) -> DbResult<Option<Holder>> {
    let held = c
        .query_row(HOLDER_SQL, params![name], holder_row)
        .optional()?;
    if let Some(h) = held {
        if h.owner != owner && holds(&h, host, now_ms) {
            return Ok(Some(h));
        }
    }
    // a name and the names under it exclude each other: the pair's lease `pair:1` and
    // its partitions' `pair:1/run:4/part:2` are never held together
    for other in ancestors(name) {
        if let Some(h) = c
            .query_row(HOLDER_SQL, params![other], holder_row)
            .optional()?
        {
            if h.owner != owner && holds(&h, host, now_ms) {
                return Ok(Some(h));
            }
        }
    }
    let below = holders_under(c, &format!("{name}/"))?;
    if let Some(h) = below
        .into_iter()
        .find(|h| h.owner != owner && holds(h, host, now_ms))
    {
        return Ok(Some(h));
    }
    c.execute(
        "INSERT INTO leases (name, owner, host, pid, purpose, acquired_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, host = excluded.host,
                pid = excluded.pid, purpose = excluded.purpose,
                acquired_at = CASE WHEN leases.owner = excluded.owner THEN leases.acquired_at
                                   ELSE excluded.acquired_at END,
                expires_at = excluded.expires_at",
        params![
            name,
            owner,
            host,
            std::process::id() as i64,
            purpose,
            now_ms,
            now_ms + ttl_ms
        ],
    )?;
    Ok(None)
}

/// The lease table of one database.
pub struct Leases<'a> {
    m: &'a Manifest,
}

impl<'a> Leases<'a> {
    pub fn new(m: &'a Manifest) -> Self {
        Leases { m }
    }

    /// Takes `name` for `owner` until `now + ttl_ms`, unless someone else holds it: then
    /// that holder is returned and nothing changes. Taking a lease one already holds renews it.
    pub fn acquire(
        &self,
        name: &str,
        owner: &str,
        host: &str,
        purpose: &str,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Option<Holder>> {
        self.m
            .with(|c| acquire_in(c, name, owner, host, purpose, now_ms, ttl_ms))
    }

    /// Pushes the expiry of a lease `owner` holds; false when it no longer holds it.
    pub fn renew(&self, name: &str, owner: &str, until_ms: i64) -> Result<bool> {
        self.m.with(|c| {
            c.execute(
                "UPDATE leases SET expires_at = ?3 WHERE name = ?1 AND owner = ?2",
                params![name, owner, until_ms],
            )
            .map(|n| n == 1)
        })
    }

    /// Gives up a lease `owner` holds (nothing when someone else holds it now).
    pub fn release(&self, name: &str, owner: &str) -> Result<()> {
        self.m.with(|c| {
            c.execute(
                "DELETE FROM leases WHERE name = ?1 AND owner = ?2",
                params![name, owner],
            )
            .map(|_| ())
        })
    }

    /// The holder of `name`, if any (expired or not).
    pub fn holder(&self, name: &str) -> Result<Option<Holder>> {
        self.m.with(|c| {
            c.query_row(HOLDER_SQL, params![name], holder_row)
                .optional()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::db::testing::conformance;
    use crate::state::db::Location;

    conformance!(one_holder_at_a_time_until_expiry_or_death);

    fn one_holder_at_a_time_until_expiry_or_death(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let l = Leases::new(&m);
        let me = crate::state::owner::owner_tag(std::process::id()).unwrap();
        let a = format!("{me}:a");
        let b = format!("{me}:b");
        // (who, at, ttl) → None (taken) or the holder's owner
        assert_eq!(
            l.acquire("pair:1", &a, "h1", "sync", 1_000, 100).unwrap(),
            None
        );
        let held = l.acquire("pair:1", &b, "h1", "sync", 1_050, 100).unwrap();
        assert_eq!(
            held.map(|h| h.owner),
            Some(a.clone()),
            "a live holder keeps it"
        );
        assert_eq!(
            l.acquire("pair:1", &a, "h1", "sync", 1_060, 100).unwrap(),
            None,
            "renew by taking again"
        );
        assert!(l.renew("pair:1", &a, 2_000).unwrap());
        assert!(!l.renew("pair:1", &b, 2_000).unwrap(), "b does not hold it");
        // a live holder on this host keeps it past its expiry
        let b_held = l.acquire("pair:1", &b, "h1", "sync", 5_000, 100).unwrap();
        assert_eq!(
            b_held.map(|h| h.owner),
            Some(a.clone()),
            "alive here: held, expired or not"
        );
        // another host cannot check our process: it waits for the expiry
        let other = l
            .acquire("pair:1", "9:9:x", "h2", "drift", 1_999, 100)
            .unwrap();
        assert!(other.is_some());
        assert_eq!(
            l.acquire("pair:1", "9:9:x", "h2", "drift", 2_000, 100)
                .unwrap(),
            None,
            "expired"
        );
        // a holder on this host whose process is gone holds nothing
        assert_eq!(
            l.acquire("pair:2", "4194304:1:dead", "h2", "sync", 5_000, 60_000)
                .unwrap(),
            None
        );
        assert_eq!(
            l.acquire("pair:2", &a, "h2", "sync", 5_001, 60_000)
                .unwrap(),
            None
        );
        l.release("pair:2", &b).unwrap();
        assert_eq!(
            l.holder("pair:2").unwrap().map(|h| h.owner),
            Some(a.clone()),
            "b's release takes nothing"
        );
        l.release("pair:2", &a).unwrap();
        assert_eq!(l.holder("pair:2").unwrap(), None);
    }
}
