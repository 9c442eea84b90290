//! The end-to-end canary: a small object written under the pair's source prefix (see
//! `core::canary`), its event waited for (the daemon notes it in `canary_events` when it
//! stores it), its replica waited for at the destination, then the same for its delete. Each
//! step's latency is measured; the first step that does not happen within the deadline names
//! the likely break. `slate check` runs it once; the daemon's `canary_interval` runs it
//! periodically.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use object_store::ObjectStoreExt;

use crate::core::error::{Result, SlateError};
use crate::core::location::Location;
use crate::state::blocking;
use crate::state::inbox::Inbox;
use crate::state::manifest::Manifest;
use crate::stores::side::{store_path, Side};

/// How often the state and the destination are looked at while waiting.
const POLL: Duration = Duration::from_millis(50);

/// Canary rows of a check killed before it cleaned up are forgotten after this long.
const STALE: Duration = Duration::from_secs(24 * 3600);

/// What one canary run saw: each step's latency from the write (or the delete) that began it.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The canary's key, relative to the pair's prefix.
    pub key: String,
    pub event: Option<Duration>,
    pub replica: Option<Duration>,
    pub delete_event: Option<Duration>,
    pub gone: Option<Duration>,
}

/// Where the chain broke, if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// No event came: the wiring (or no daemon follows the pair with this database).
    NoEvent,
    /// The event came, the replica did not: the daemon or the destination.
    NoReplica,
    NoDeleteEvent,
    NotDeleted,
}

impl Report {
    pub fn verdict(&self) -> Verdict {
        match (self.event, self.replica, self.delete_event, self.gone) {
            (None, _, _, _) => Verdict::NoEvent,
            (_, None, _, _) => Verdict::NoReplica,
            (_, _, None, _) => Verdict::NoDeleteEvent,
            (_, _, _, None) => Verdict::NotDeleted,
            _ => Verdict::Ok,
        }
    }

    /// One line: what broke and what to look at, or the latencies.
    pub fn summary(&self, src: &str, dst: &str, timeout: Duration) -> String {
        let secs = timeout.as_secs_f64();
        match self.verdict() {
            Verdict::Ok => format!(
                "ok: {src} -> {dst} follows its events: write to replica {}, delete to gone {} \
                 (events after {} and {})",
                s(self.replica),
                s(self.gone),
                s(self.event),
                s(self.delete_event)
            ),
            Verdict::NoEvent => format!(
                "no event for the canary within {secs:.0} s: the source's event wiring delivers \
                 nothing (`slate events check`), or no daemon follows {src} -> {dst} with this \
                 database"
            ),
            Verdict::NoReplica => format!(
                "the canary's event arrived after {} but no replica within {secs:.0} s: the \
                 daemon or the destination is failing (its log, `slate deadletters list`)",
                s(self.event)
            ),
            Verdict::NoDeleteEvent => format!(
                "the canary was replicated in {}, but no event of its delete came within \
                 {secs:.0} s: the wiring leaves deletes out (`slate events check`)",
                s(self.replica)
            ),
            Verdict::NotDeleted => format!(
                "the canary's delete event arrived after {} but the replica was not deleted \
                 within {secs:.0} s: the daemon's deletes are held (the delete brake?) or failing",
                s(self.delete_event)
            ),
        }
    }
}

fn s(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.2} s", d.as_secs_f64()))
        .unwrap_or_else(|| "-".into())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The key of `rel` at `loc`, as the store names it.
fn full_key(loc: &Location, rel: &str) -> String {
    if loc.prefix.is_empty() {
        rel.to_string()
    } else {
        format!("{}/{rel}", loc.prefix.trim_end_matches('/'))
    }
}

async fn put(side: &Side, rel: &str, body: Vec<u8>) -> Result<()> {
    let loc = side.location();
    match side {
        Side::Local { .. } => {
            let path = std::path::Path::new(&loc.prefix).join(rel);
            let io = |e: std::io::Error| SlateError::Store {
                url: path.display().to_string(),
                detail: e.to_string(),
            };
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent).await.map_err(io)?;
            }
            tokio::fs::write(&path, body).await.map_err(io)
        }
        Side::Cloud { store, .. } => {
            let key = full_key(loc, rel);
            let attrs = object_store::Attributes::from_iter([(
                object_store::Attribute::ContentType,
                object_store::AttributeValue::from("text/plain"),
            )]);
            store
                .put_opts(
                    &store_path(&key)?,
                    body.into(),
                    object_store::PutOptions {
                        attributes: attrs,
                        ..Default::default()
                    },
                )
                .await
                .map(|_| ())
                .map_err(|e| SlateError::Store {
                    url: format!("{loc}/{rel}"),
                    detail: crate::stores::side::one_line(&e),
                })
        }
    }
}

async fn delete(side: &Side, rel: &str) -> Result<()> {
    let loc = side.location();
    match side {
        Side::Local { .. } => {
            let path = std::path::Path::new(&loc.prefix).join(rel);
            match tokio::fs::remove_file(&path).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(SlateError::Store {
                    url: path.display().to_string(),
                    detail: e.to_string(),
                }),
                _ => Ok(()),
            }
        }
        Side::Cloud { store, .. } => match store.delete(&store_path(&full_key(loc, rel))?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(SlateError::Store {
                url: format!("{loc}/{rel}"),
                detail: crate::stores::side::one_line(&e),
            }),
        },
    }
}

/// Whether `rel` is at `side` with `len` bytes.
async fn holds(side: &Side, rel: &str, len: usize) -> Result<bool> {
    let loc = side.location();
    match side {
        Side::Local { .. } => {
            let path = std::path::Path::new(&loc.prefix).join(rel);
            Ok(tokio::fs::metadata(&path)
                .await
                .is_ok_and(|m| m.len() == len as u64))
        }
        Side::Cloud { store, .. } => match store.head(&store_path(&full_key(loc, rel))?).await {
            Ok(m) => Ok(m.size == len as u64),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(SlateError::Store {
                url: format!("{loc}/{rel}"),
                detail: crate::stores::side::one_line(&e),
            }),
        },
    }
}

async fn gone(side: &Side, rel: &str) -> Result<bool> {
    let loc = side.location();
    match side {
        Side::Local { .. } => Ok(!std::path::Path::new(&loc.prefix).join(rel).exists()),
        Side::Cloud { store, .. } => match store.head(&store_path(&full_key(loc, rel))?).await {
            Ok(_) => Ok(false),
            Err(object_store::Error::NotFound { .. }) => Ok(true),
            Err(e) => Err(SlateError::Store {
                url: format!("{loc}/{rel}"),
                detail: crate::stores::side::one_line(&e),
            }),
        },
    }
}

/// Waits until `cond` holds or `deadline` passes: the time from `from` when it held.
async fn until<F, Fut>(from: Instant, deadline: Instant, mut cond: F) -> Result<Option<Duration>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    loop {
        if cond().await? {
            return Ok(Some(from.elapsed()));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A new canary key (relative to a pair's prefix) for `who` (`check`, `daemon`) of `pair_id`.
pub fn new_key(who: &str, pair_id: i64) -> String {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let host = crate::state::inbox::worker().host.clone();
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    crate::core::canary::key(who, &host, std::process::id(), pair_id, now_ms(), seq)
}

/// Removes canary `rel` from both sides, and its rows from the state (a run cut short: a
/// daemon stopping mid-run).
pub async fn remove(db: Arc<Manifest>, pair_id: i64, src: &Location, dst: &Location, rel: &str) {
    if let (Ok(s), Ok(d)) = (Side::open(src), Side::open(dst)) {
        cleanup(&db, pair_id, &s, &d, rel, true).await;
    }
}

async fn cleanup(
    db: &Arc<Manifest>,
    pair_id: i64,
    src: &Side,
    dst: &Side,
    rel: &str,
    at_dst: bool,
) {
    let _ = delete(src, rel).await;
    if at_dst {
        let _ = delete(dst, rel).await;
    }
    // a local side keeps no empty canary folder (another canary in it keeps it)
    for side in [src, dst] {
        if let Side::Local { loc } = side {
            let _ = tokio::fs::remove_dir(
                std::path::Path::new(&loc.prefix).join(crate::core::canary::DIR),
            )
            .await;
        }
    }
    let (db, k) = (db.clone(), rel.to_string());
    let _ = blocking(move || Inbox::new(&db).forget_canary(pair_id, &k, STALE.as_millis() as i64))
        .await;
}

/// One canary run on the pair `pair_id` (`src` -> `dst`, followed by a daemon on `db`) with
/// the key `rel` ([`new_key`]): each step waits at most `timeout`. `say` is told each step as
/// it happens. The canary is removed from both sides whatever happened, and its rows from
/// the state.
pub async fn run(
    db: Arc<Manifest>,
    pair_id: i64,
    src: &Location,
    dst: &Location,
    rel: &str,
    timeout: Duration,
    say: &(dyn Fn(String) + Send + Sync),
) -> Result<Report> {
    let src_side = Side::open(src)?;
    let dst_side = Side::open(dst)?;
    let rel = rel.to_string();
    let body = format!("slate canary {rel}\n").into_bytes();
    let len = body.len();
    let mut report = Report {
        key: rel.clone(),
        event: None,
        replica: None,
        delete_event: None,
        gone: None,
    };
    let events = |db: Arc<Manifest>, k: String| async move {
        blocking(move || Inbox::new(&db).canary_events(pair_id, &k)).await
    };
    let result = async {
        let t0 = Instant::now();
        put(&src_side, &rel, body).await?;
        say(format!("canary {rel} written to {src}"));
        let deadline = t0 + timeout;
        report.event = until(t0, deadline, || {
            let f = events(db.clone(), rel.clone());
            async move { Ok(f.await?.0.is_some()) }
        })
        .await?;
        let Some(e) = report.event else {
            return Ok(());
        };
        say(format!("event stored after {}", s(Some(e))));
        report.replica = until(t0, deadline, || holds(&dst_side, &rel, len)).await?;
        let Some(r) = report.replica else {
            return Ok(());
        };
        say(format!("replica at {dst} after {}", s(Some(r))));
        let t1 = Instant::now();
        delete(&src_side, &rel).await?;
        say(format!("canary deleted at {src}"));
        let deadline = t1 + timeout;
        report.delete_event = until(t1, deadline, || {
            let f = events(db.clone(), rel.clone());
            async move { Ok(f.await?.1.is_some()) }
        })
        .await?;
        let Some(d) = report.delete_event else {
            return Ok(());
        };
        say(format!("delete event stored after {}", s(Some(d))));
        report.gone = until(t1, deadline, || gone(&dst_side, &rel)).await?;
        if let Some(g) = report.gone {
            say(format!("replica deleted after {}", s(Some(g))));
        }
        Ok::<(), SlateError>(())
    }
    .await;
    // whatever happened, no canary is left behind (the destination's too: a daemon that
    // missed the delete would not remove it)
    cleanup(
        &db,
        pair_id,
        &src_side,
        &dst_side,
        &rel,
        report.gone.is_none(),
    )
    .await;
    result.map(|_| report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_name_the_first_missing_step() {
        let d = Some(Duration::from_millis(300));
        let r = |event, replica, delete_event, gone| Report {
            key: ".slate-canary/x".into(),
            event,
            replica,
            delete_event,
            gone,
        };
        let t = Duration::from_secs(60);
        let cases = [
            (
                r(None, None, None, None),
                Verdict::NoEvent,
                "no event for the canary within 60 s",
            ),
            (
                r(d, None, None, None),
                Verdict::NoReplica,
                "but no replica within 60 s",
            ),
            (
                r(d, d, None, None),
                Verdict::NoDeleteEvent,
                "no event of its delete",
            ),
            (
                r(d, d, d, None),
                Verdict::NotDeleted,
                "replica was not deleted",
            ),
            (
                r(d, d, d, d),
                Verdict::Ok,
                "ok: a -> b follows its events: write to replica 0.30 s",
            ),
        ];
        for (report, want, text) in cases {
            assert_eq!(report.verdict(), want);
            let line = report.summary("a", "b", t);
            assert!(line.contains(text), "{line}");
            assert!(!line.contains('\n'));
        }
    }
}
