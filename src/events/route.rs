//! From parsed cloud messages to inbox rows: every transport (SQS, a Storage Queue, Pub/Sub,
//! the webhook) sorts what a message names into the keys of each pair it feeds (relative to
//! the pair's prefix), dead letters (a key of no pair, a malformed message), prefixes to
//! reconcile as a whole, and the events it may ignore; then [`Fanout::store`] stores all of it
//! in one transaction before the message is acknowledged (rule 2: ack after commit).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, RwLock};

use super::{EventKind, Parsed, Token};
use crate::core::error::Result;
use crate::core::location::Location;
use crate::state::inbox::{DeadLetter, Inbox, Intake, Kind};
use crate::state::manifest::Manifest;

/// One inbox row to be: key relative to the pair's prefix, what happened, ordering token.
/// A key of one pair's: the relative key, the event's kind, its ordering token, and the
/// provider's time of the change (unix ms) when the event says it.
pub type Row = (String, Kind, Option<String>, Option<i64>);

/// Where the keys of one pair live at its source: bucket (container) and prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub bucket: String,
    /// Without a trailing `/`; empty for the whole bucket.
    pub prefix: String,
}

impl Scope {
    pub fn of(loc: &Location) -> Scope {
        Scope {
            bucket: loc.bucket.clone(),
            prefix: loc.prefix.clone(),
        }
    }

    /// `key` relative to this scope, when it is inside it.
    pub fn rel<'a>(&self, bucket: &str, key: &'a str) -> Option<&'a str> {
        if bucket != self.bucket {
            return None;
        }
        let rel = if self.prefix.is_empty() {
            key
        } else {
            key.strip_prefix(self.prefix.as_str())?.strip_prefix('/')?
        };
        (!rel.is_empty()).then_some(rel)
    }

    /// A prefix (ending with `/`) relative to this scope: `Some("")` when it covers the whole
    /// scope, `None` when it does not overlap it.
    pub fn rel_prefix(&self, bucket: &str, prefix: &str) -> Option<String> {
        if bucket != self.bucket {
            return None;
        }
        if self.prefix.is_empty() {
            return Some(prefix.to_string());
        }
        let mine = format!("{}/", self.prefix);
        if let Some(rest) = prefix.strip_prefix(&mine) {
            Some(rest.to_string())
        } else if mine.starts_with(prefix) {
            Some(String::new()) // a parent directory of the pair's prefix changed
        } else {
            None
        }
    }
}

/// The inbox's text form of an ordering token, compared as a string only between events of
/// one key of one pair (one provider): S3's hex is left-padded to 40 upper-case digits (S3's
/// rule: pad the shorter, then compare), Event Grid's kept. GCS's numbers are padded to 20
/// digits each and followed by the kind: a delete carries the generation it deleted, the same
/// as that generation's create, and must order after it (a re-create has a newer generation).
pub fn token_text(t: &Token, kind: &EventKind) -> String {
    match t {
        Token::S3(s) => format!("{:0>40}", s.to_ascii_uppercase()),
        Token::EventGrid(s) => s.clone(),
        Token::Gcs {
            generation,
            metageneration,
        } => {
            let k = match kind {
                EventKind::Upsert => 0,
                EventKind::Delete => 1,
            };
            format!("{generation:020}.{metageneration:020}.{k}")
        }
    }
}

/// What one message means for one pair.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Routed {
    pub rows: Vec<Row>,
    /// Reasons, one per event of this pair that can never be applied (a key object_store
    /// would name differently): the message is kept with them.
    pub dead: Vec<String>,
    /// Events (and directory events) outside this pair's source: another pair's, or none's
    /// (`strangers` decides which), never this pair's dead letters.
    pub outside: Vec<String>,
    /// Prefixes (relative, ending with `/`, or "" for everything) to reconcile as a whole.
    pub prefixes: Vec<String>,
    pub ignored: u64,
    /// Event Grid's webhook handshake code, if the message was one.
    pub handshake: Option<String>,
}

impl Routed {
    /// Adds what `parsed` names for the pair at `scope`; `what` names the source in dead-letter
    /// reasons (e.g. `"s3"`, `"az"`).
    pub fn add(&mut self, parsed: Parsed, scope: &Scope, what: &str) {
        match parsed {
            Parsed::Events(evs) => {
                for ev in evs {
                    match scope.rel(&ev.bucket, &ev.key) {
                        // A folder marker (`folder/`, as consoles create them) is not an object
                        // slate replicates: listings do not show it either (copy::list).
                        Some(rel) if rel.ends_with('/') => self.ignored += 1,
                        // object_store would name another key for it (see store_path): never
                        // applied, kept with the reason
                        Some(rel) if rel.starts_with('/') || rel.contains("//") => {
                            self.dead.push(format!(
                                "event for {what}://{}/{}: {}",
                                ev.bucket,
                                ev.key,
                                crate::stores::side::unaddressable(rel)
                            ))
                        }
                        Some(rel) => {
                            let kind = match ev.kind {
                                EventKind::Upsert => Kind::Upsert,
                                EventKind::Delete => Kind::Delete,
                            };
                            let token =
                                ev.sequencer.as_ref().map(|t| token_text(t, &ev.kind));
                            let at = ev.event_time.as_deref().and_then(super::event_ms);
                            self.rows.push((rel.to_string(), kind, token, at));
                        }
                        None => self.outside.push(format!(
                            "event for {what}://{}/{} is outside the pair's source {what}://{}/{}",
                            ev.bucket, ev.key, scope.bucket, scope.prefix
                        )),
                    }
                }
            }
            Parsed::Batch(items) => {
                for p in items {
                    self.add(p, scope, what);
                }
            }
            Parsed::Ignore(_) => self.ignored += 1,
            Parsed::Handshake { validation_code } => {
                self.ignored += 1;
                self.handshake = Some(validation_code);
            }
            // a malformed event belongs to no pair: `strangers` dead-letters it once per
            // message, not once per pair
            Parsed::Invalid(_) => {}
            Parsed::PrefixReconcile { bucket, prefix } => {
                match scope.rel_prefix(&bucket, &prefix) {
                    Some(p) => self.prefixes.push(p),
                    None => self.outside.push(format!(
                        "directory event for {what}://{bucket}/{prefix} is outside the pair's source {what}://{}/{}",
                        scope.bucket, scope.prefix
                    )),
                }
            }
        }
    }
}

/// What of `parsed` none of `scopes` takes: the reasons to keep (malformed events, events of
/// a bucket no pair follows), and how many events name a key of a followed bucket outside
/// every pair's prefix (counted and ignored: a bucket's queue carries every write of the
/// bucket, and a pair on `s3://b/data` has no use for `b/logs/…`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Strangers {
    pub reasons: Vec<String>,
    pub outside: u64,
}

/// The [`Strangers`] of a message shared by `scopes`.
pub fn strangers(parsed: &Parsed, scopes: &[Scope], what: &str) -> Strangers {
    let mut out = Strangers::default();
    add_strangers(parsed, scopes, what, &mut out);
    out
}

fn add_strangers(parsed: &Parsed, scopes: &[Scope], what: &str, out: &mut Strangers) {
    let known = |bucket: &str| scopes.iter().any(|s| s.bucket == bucket);
    match parsed {
        Parsed::Events(evs) => {
            for ev in evs {
                if scopes.iter().any(|s| s.rel(&ev.bucket, &ev.key).is_some()) {
                    continue;
                }
                if known(&ev.bucket) {
                    tracing::debug!(what, bucket = %ev.bucket, key = %ev.key,
                        "event outside every pair's prefix: ignored");
                    out.outside += 1;
                } else {
                    out.reasons.push(format!(
                        "event for {what}://{}/{} is in a bucket no pair follows",
                        ev.bucket, ev.key
                    ));
                }
            }
        }
        Parsed::Batch(items) => {
            for p in items {
                add_strangers(p, scopes, what, out);
            }
        }
        Parsed::PrefixReconcile { bucket, prefix } => {
            if scopes
                .iter()
                .any(|s| s.rel_prefix(bucket, prefix).is_some())
            {
            } else if known(bucket) {
                out.outside += 1;
            } else {
                out.reasons.push(format!(
                    "directory event for {what}://{bucket}/{prefix} is in a bucket no pair follows"
                ));
            }
        }
        Parsed::Invalid(why) => out.reasons.push(why.clone()),
        Parsed::Ignore(_) | Parsed::Handshake { .. } => {}
    }
}

/// The reasons of one message as one line: at most [`super::MAX_REASONS`], the rest counted.
pub fn join_reasons(reasons: &[String]) -> String {
    let max = super::MAX_REASONS;
    let mut line = reasons
        .iter()
        .take(max)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("; ");
    if reasons.len() > max {
        line.push_str(&format!("; and {} more", reasons.len() - max));
    }
    line
}

/// One WARN line per dead letter, at most [`LOGGED_PER_MINUTE`] a minute (a queue full of bad
/// messages must not flood the log); the ones left out are counted in the next line logged.
pub fn warn_dead_letter(source: &str, queue: &str, pair_id: Option<i64>, reason: &str) {
    static WINDOW: std::sync::Mutex<Option<(std::time::Instant, u32, u64)>> =
        std::sync::Mutex::new(None);
    let Ok(mut w) = WINDOW.lock() else {
        return;
    };
    let now = std::time::Instant::now();
    let (start, logged, skipped) = w.get_or_insert((now, 0, 0));
    if now.duration_since(*start) >= std::time::Duration::from_secs(60) {
        (*start, *logged) = (now, 0);
    }
    if *logged >= LOGGED_PER_MINUTE {
        *skipped += 1;
        return;
    }
    *logged += 1;
    let not_logged = std::mem::take(skipped);
    tracing::warn!(source, queue, pair = ?pair_id, reason, not_logged,
        "message kept as a dead letter (slate deadletters lists them)");
}

/// `what` at WARN, at most once a minute per process (for a warning a busy webhook would
/// otherwise repeat with every delivery).
pub fn warn_once_a_minute(what: &'static str) {
    static LAST: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let Ok(mut last) = LAST.lock() else { return };
    let now = std::time::Instant::now();
    if last.is_some_and(|t| now.duration_since(t) < std::time::Duration::from_secs(60)) {
        return;
    }
    *last = Some(now);
    tracing::warn!("{what}");
}

/// Dead letters logged at WARN per minute, at most.
pub const LOGGED_PER_MINUTE: u32 = 10;

/// One message as a transport received it: the raw text (kept for a dead letter), the text
/// the parser read when the transport decoded it first, and what the parser made of it.
#[derive(Debug, Clone)]
pub struct Received {
    pub raw: Vec<u8>,
    pub decoded: Option<Vec<u8>>,
    pub parsed: std::result::Result<Parsed, String>,
}

impl Received {
    pub fn new(raw: Vec<u8>, parsed: std::result::Result<Parsed, String>) -> Received {
        Received {
            raw,
            decoded: None,
            parsed,
        }
    }
}

/// Counters of one pair's intake (events stored for it by any consumer, the webhook or the
/// local watcher), for health lines, `/metrics` and `GET /pairs`.
#[derive(Debug, Default)]
pub struct IntakeStats {
    /// Cloud messages (or webhook deliveries) that named the pair.
    pub messages: AtomicU64,
    /// Key events stored in the pair's inbox.
    pub events: AtomicU64,
    /// Well-formed messages that named nothing to do (test events, overwrites, handshakes).
    pub ignored: AtomicU64,
    /// Prefixes to reconcile as a whole (directory renames and deletes, folders the watcher
    /// saw appear or vanish, a watch queue overflow).
    pub prefixes: AtomicU64,
    /// Events on the pair's queue (or webhook) for keys of a followed bucket outside every
    /// pair's prefix: counted and ignored.
    pub outside: AtomicU64,
    /// When an event of the pair was last stored (unix ms; 0: never).
    pub last_event_ms: AtomicU64,
}

/// A pair as the event layer sees it: its id in the database, where its keys live at the
/// source, and its intake counters.
#[derive(Debug, Clone)]
pub struct Target {
    pub pair_id: i64,
    pub scope: Scope,
    pub stats: Arc<IntakeStats>,
}

/// Every pair one transport feeds (one queue, one subscription, the webhook of one cloud):
/// a message is routed to each pair whose source it names and stored for all of them in one
/// inbox transaction, so that a message is acknowledged only when every pair has its rows
/// (rule 2 of docs/ARCHITECTURE.md), and one queue can feed any number of pairs.
pub struct Fanout {
    db: Arc<Manifest>,
    /// The scheme's short name used in dead-letter reasons (`s3`, `az`, `gs`).
    what: &'static str,
    /// The queue, subscription or webhook route it reads (for dead letters of no pair).
    queue: String,
    targets: RwLock<Vec<Target>>,
    /// Dead letters stored by this fan-out (messages no pair could use).
    pub dead_lettered: AtomicU64,
    /// Events for keys of a followed bucket outside every pair's prefix (ignored).
    pub outside: AtomicU64,
}

impl std::fmt::Debug for Fanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fanout")
            .field("what", &self.what)
            .field("queue", &self.queue)
            .field("targets", &self.targets().len())
            .finish()
    }
}

impl Fanout {
    pub fn new(db: Arc<Manifest>, what: &'static str, queue: impl Into<String>) -> Arc<Fanout> {
        Arc::new(Fanout {
            db,
            what,
            queue: queue.into(),
            targets: RwLock::new(Vec::new()),
            dead_lettered: AtomicU64::new(0),
            outside: AtomicU64::new(0),
        })
    }

    /// Adds a pair (a pair already there is replaced: a restarted pair registers again).
    pub fn add(&self, t: Target) {
        if let Ok(mut v) = self.targets.write() {
            v.retain(|x| x.pair_id != t.pair_id);
            v.push(t);
        }
    }

    pub fn targets(&self) -> Vec<Target> {
        self.targets.read().map(|t| t.clone()).unwrap_or_default()
    }

    /// Routes and stores a batch of messages in one transaction: each pair's rows and
    /// prefixes, and for a message with anything no pair could use (a malformed event, a
    /// bucket no pair follows, a key no store can address) one dead letter holding the raw
    /// message once and its reasons (at most [`super::MAX_REASONS`]). Events of a followed
    /// bucket outside every pair's prefix are counted and ignored. Only after this returns Ok
    /// may the messages be acknowledged.
    pub async fn store(&self, source: &'static str, batch: Vec<Received>) -> Result<()> {
        self.store_at(source, batch, None).await
    }

    /// [`Fanout::store`], and `cursor` (a log-like source's position after `batch`: feed,
    /// cursor) in the same transaction.
    pub async fn store_at(
        &self,
        source: &'static str,
        batch: Vec<Received>,
        cursor: Option<(String, String)>,
    ) -> Result<()> {
        let targets = self.targets();
        let scopes: Vec<Scope> = targets.iter().map(|t| t.scope.clone()).collect();
        let mut intake = Intake {
            cursor,
            ..Default::default()
        };
        // per target: messages that named it, rows, ignored, prefixes
        let mut touched = vec![(0u64, 0u64, 0u64, 0u64); targets.len()];
        let mut outside = 0u64;
        for Received {
            raw,
            decoded,
            parsed,
        } in batch
        {
            let mut reasons = Vec::new();
            // pairs whose keys (unaddressable) are among the reasons; `nobody`: a reason that
            // is no pair's
            let mut owners = std::collections::BTreeSet::new();
            let mut nobody = false;
            match parsed {
                Ok(Parsed::Ignore(_) | Parsed::Handshake { .. }) => {
                    // well-formed, nothing to do (test events, overwrites' deletes, handshakes)
                    for c in touched.iter_mut() {
                        c.2 += 1;
                    }
                }
                Err(why) => {
                    reasons.push(why);
                    nobody = true;
                }
                Ok(parsed) if targets.is_empty() => {
                    reasons.push(format!("no {}:// pair follows {source}", self.what));
                    reasons.extend(strangers(&parsed, &[], self.what).reasons);
                    nobody = true;
                }
                Ok(parsed) => {
                    let st = strangers(&parsed, &scopes, self.what);
                    nobody |= !st.reasons.is_empty();
                    reasons.extend(st.reasons);
                    outside += st.outside;
                    for (i, t) in targets.iter().enumerate() {
                        let mut routed = Routed::default();
                        routed.add(parsed.clone(), &t.scope, self.what);
                        let named = !routed.rows.is_empty() || !routed.prefixes.is_empty();
                        let c = &mut touched[i];
                        c.0 += u64::from(named);
                        c.1 += routed.rows.len() as u64;
                        c.2 += routed.ignored;
                        c.3 += routed.prefixes.len() as u64;
                        // unaddressable keys of this pair (never applied, kept with their
                        // reason); events outside the pair are `strangers`' business
                        for why in routed.dead {
                            owners.insert(t.pair_id);
                            reasons.push(why);
                        }
                        intake.rows.extend(
                            routed
                                .rows
                                .into_iter()
                                .map(|(k, kind, tok, at)| (t.pair_id, k, kind, tok, at)),
                        );
                        intake
                            .prefixes
                            .extend(routed.prefixes.into_iter().map(|p| (t.pair_id, p)));
                    }
                }
            }
            if reasons.is_empty() {
                continue;
            }
            let pair_id = match (nobody, owners.len()) {
                (false, 1) => owners.into_iter().next(),
                _ => None,
            };
            intake.dead.push(DeadLetter {
                pair_id,
                source: source.to_string(),
                queue: self.queue.clone(),
                raw,
                decoded,
                reason: join_reasons(&reasons),
            });
        }
        let letters: Vec<(Option<i64>, String)> = intake
            .dead
            .iter()
            .map(|d| (d.pair_id, d.reason.clone()))
            .collect();
        let db = self.db.clone();
        crate::state::blocking(move || Inbox::new(&db).store(&intake)).await?;
        self.dead_lettered.fetch_add(letters.len() as u64, Relaxed);
        self.outside.fetch_add(outside, Relaxed);
        for (pair_id, reason) in &letters {
            warn_dead_letter(source, &self.queue, *pair_id, reason);
        }
        let now = crate::core::metrics::unix_ms();
        for (t, (msgs, rows, ignored, prefixes)) in targets.iter().zip(touched) {
            t.stats.messages.fetch_add(msgs, Relaxed);
            t.stats.events.fetch_add(rows, Relaxed);
            t.stats.ignored.fetch_add(ignored, Relaxed);
            t.stats.prefixes.fetch_add(prefixes, Relaxed);
            // every pair the queue feeds sees what none of them takes
            t.stats.outside.fetch_add(outside, Relaxed);
            if rows + prefixes > 0 {
                t.stats.last_event_ms.store(now, Relaxed);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::ChangeEvent;

    fn ev(bucket: &str, key: &str, kind: EventKind) -> ChangeEvent {
        crate::events::change(bucket, key, kind)
    }

    #[test]
    fn keys_are_made_relative_to_the_pair_and_strangers_dead_lettered() {
        let scope = Scope {
            bucket: "b".into(),
            prefix: "data".into(),
        };
        // (bucket, key) → relative key, or None for a dead letter
        let table: &[(&str, &str, Option<&str>)] = &[
            ("b", "data/x", Some("x")),
            ("b", "data/a/b c+", Some("a/b c+")),
            ("b", "data", None),
            ("b", "data/", None),
            ("b", "database/x", None),
            ("b", "other/x", None),
            ("c", "data/x", None),
            // a key object_store would address as another key: dead-lettered, never applied
            ("b", "data//x", None),
            ("b", "data/a//b", None),
        ];
        for (bucket, key, want) in table {
            if !key.contains("//") {
                assert_eq!(scope.rel(bucket, key), *want, "{bucket}/{key}");
            }
            let mut r = Routed::default();
            r.add(
                Parsed::Events(vec![ev(bucket, key, EventKind::Delete)]),
                &scope,
                "s3",
            );
            match want {
                Some(rel) => {
                    assert_eq!(r.rows, vec![(rel.to_string(), Kind::Delete, None, None)]);
                    assert!(r.dead.is_empty());
                }
                None => {
                    assert!(r.rows.is_empty());
                    // an unaddressable key is the pair's own dead letter; any other is outside
                    let (mine, other) = if key.contains("//") {
                        (&r.dead, &r.outside)
                    } else {
                        (&r.outside, &r.dead)
                    };
                    assert!(other.is_empty(), "{bucket}/{key}: {r:?}");
                    assert_eq!(mine.len(), 1, "{bucket}/{key}");
                    assert!(mine[0].contains(key), "{}", mine[0]);
                }
            }
        }
        let whole = Scope {
            bucket: "b".into(),
            prefix: String::new(),
        };
        assert_eq!(whole.rel("b", "data/x"), Some("data/x"));
    }

    #[test]
    fn prefixes_inside_around_and_outside_the_pair() {
        let scope = Scope {
            bucket: "c".into(),
            prefix: "data/set".into(),
        };
        let table: &[(&str, &str, Option<&str>)] = &[
            ("c", "data/set/dir/", Some("dir/")),
            ("c", "data/set/", Some("")),
            ("c", "data/", Some("")), // a parent directory: the whole pair
            ("c", "data/settings/", None),
            ("c", "other/", None),
            ("d", "data/set/dir/", None),
        ];
        for (bucket, prefix, want) in table {
            assert_eq!(
                scope.rel_prefix(bucket, prefix).as_deref(),
                *want,
                "{bucket}/{prefix}"
            );
        }
    }

    #[test]
    fn folder_markers_are_ignored_and_the_bucket_is_never_a_key() {
        let whole = Scope {
            bucket: "b".into(),
            prefix: String::new(),
        };
        // (key, kind) → ignored: neither a row (no HEAD, PUT or DELETE) nor a dead letter
        for (key, kind) in [
            ("/", EventKind::Delete),
            ("//", EventKind::Upsert),
            ("folder/", EventKind::Delete),
            ("a/b/", EventKind::Upsert),
        ] {
            let mut r = Routed::default();
            r.add(Parsed::Events(vec![ev("b", key, kind)]), &whole, "s3");
            assert!(r.rows.is_empty(), "{key}: {:?}", r.rows);
            assert!(r.dead.is_empty(), "{key}: {:?}", r.dead);
            assert_eq!(r.ignored, 1, "{key}");
        }
        let mut r = Routed::default();
        r.add(
            Parsed::Events(vec![ev("b", "/etc", EventKind::Delete)]),
            &whole,
            "s3",
        );
        assert!(r.rows.is_empty());
        assert!(r.dead[0].contains("beginning with '/'"), "{:?}", r.dead);
    }

    #[test]
    fn invalid_events_are_nobodys_and_strangers_names_each() {
        let scope = Scope {
            bucket: "b".into(),
            prefix: String::new(),
        };
        let parsed = Parsed::Batch(vec![
            Parsed::Events(vec![ev("b", "k", EventKind::Upsert)]),
            Parsed::Invalid("[1].subject: missing".into()),
            Parsed::Invalid("[2]: expected an object, found null".into()),
        ]);
        let mut r = Routed::default();
        r.add(parsed.clone(), &scope, "az");
        assert_eq!(r.rows, vec![("k".to_string(), Kind::Upsert, None, None)]);
        assert!(r.dead.is_empty() && r.prefixes.is_empty(), "{r:?}");
        assert_eq!(r.ignored, 0);
        assert_eq!(
            strangers(&parsed, std::slice::from_ref(&scope), "az"),
            Strangers {
                reasons: vec![
                    "[1].subject: missing".to_string(),
                    "[2]: expected an object, found null".to_string()
                ],
                outside: 0
            }
        );
    }

    #[test]
    fn events_outside_every_prefix_of_a_followed_bucket_are_counted_not_kept() {
        let scopes = [
            Scope {
                bucket: "b".into(),
                prefix: "data".into(),
            },
            Scope {
                bucket: "b".into(),
                prefix: "models".into(),
            },
        ];
        // (bucket, key) → (reasons, outside)
        let table: &[(&str, &str, usize, u64)] = &[
            ("b", "data/x", 0, 0),
            ("b", "models/y", 0, 0),
            ("b", "logs/z", 0, 1),
            ("b", "database/x", 0, 1),
            ("other", "data/x", 1, 0),
        ];
        for (bucket, key, reasons, outside) in table {
            let st = strangers(
                &Parsed::Events(vec![ev(bucket, key, EventKind::Upsert)]),
                &scopes,
                "s3",
            );
            assert_eq!(
                (st.reasons.len(), st.outside),
                (*reasons, *outside),
                "{bucket}/{key}: {st:?}"
            );
        }
        let dir = Parsed::PrefixReconcile {
            bucket: "b".into(),
            prefix: "logs/".into(),
        };
        assert_eq!(strangers(&dir, &scopes, "s3").outside, 1);
    }

    #[test]
    fn reasons_of_one_message_are_bounded() {
        let many: Vec<String> = (0..25).map(|i| format!("[{i}]: bad")).collect();
        let line = join_reasons(&many);
        assert!(line.starts_with("[0]: bad; [1]: bad;"), "{line}");
        assert!(line.ends_with("[9]: bad; and 15 more"), "{line}");
        assert_eq!(join_reasons(&many[..2]), "[0]: bad; [1]: bad");
    }

    /// (pair, source, queue, raw, reason) of every dead letter, in order.
    type Letter = (Option<i64>, String, String, Vec<u8>, String);
    fn dead_letters(db: &Manifest) -> Vec<Letter> {
        db.read(|c| {
            c.query_map(
                "SELECT pair_id, source, queue, raw, reason FROM dead_letters ORDER BY id",
                crate::state::db::params![],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
        })
        .unwrap()
    }

    #[tokio::test]
    async fn fanout_stores_the_good_events_and_one_dead_letter_per_bad_message() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Manifest::open(&dir.path().join("s.db")).unwrap());
        let one = db.pair("az://b/one", "/tmp/one").unwrap().id;
        let two = db.pair("az://b/two", "/tmp/two").unwrap().id;
        let fan = Fanout::new(db.clone(), "az", "azqueue://acct/q");
        for (id, prefix) in [(one, "one"), (two, "two")] {
            fan.add(Target {
                pair_id: id,
                scope: Scope {
                    bucket: "b".into(),
                    prefix: prefix.into(),
                },
                stats: Arc::default(),
            });
        }
        // a batch of three whose middle event is malformed and one names a key outside both
        // pairs; then a message that failed whole; then one of a bucket no pair follows
        let raw = b"[{...}, {...}, {...}]".to_vec();
        let batch = Parsed::Batch(vec![
            Parsed::Events(vec![
                ev("b", "one/a", EventKind::Upsert),
                ev("b", "two/c", EventKind::Delete),
                ev("b", "logs/z", EventKind::Upsert),
            ]),
            Parsed::Invalid("[1].subject: missing".into()),
            Parsed::Invalid("[3].subject: missing".into()),
        ]);
        fan.store(
            "azqueue",
            vec![
                Received::new(raw.clone(), Ok(batch)),
                Received::new(b"garbage".to_vec(), Err("body: not JSON".into())),
                Received::new(
                    b"{elsewhere}".to_vec(),
                    Ok(Parsed::Events(vec![ev("c", "one/a", EventKind::Upsert)])),
                ),
                // an unaddressable key of pair one: the letter is that pair's
                Received::new(
                    b"{slashes}".to_vec(),
                    Ok(Parsed::Events(vec![ev("b", "one/a//b", EventKind::Upsert)])),
                ),
            ],
        )
        .await
        .unwrap();
        let inbox = Inbox::new(&db);
        let keys = |id| -> Vec<(String, Kind)> {
            inbox
                .take(id, 10)
                .unwrap()
                .into_iter()
                .map(|p| (p.key, p.kind))
                .collect()
        };
        assert_eq!(keys(one), vec![("a".to_string(), Kind::Upsert)]);
        assert_eq!(keys(two), vec![("c".to_string(), Kind::Delete)]);
        // one dead letter per message (the raw text once, its reasons joined), none for the
        // key outside both prefixes
        let q = "azqueue://acct/q".to_string();
        let got = dead_letters(&db);
        assert_eq!(
            got[..3],
            [
                (
                    None,
                    "azqueue".into(),
                    q.clone(),
                    raw.clone(),
                    "[1].subject: missing; [3].subject: missing".into()
                ),
                (
                    None,
                    "azqueue".into(),
                    q.clone(),
                    b"garbage".to_vec(),
                    "body: not JSON".into()
                ),
                (
                    None,
                    "azqueue".into(),
                    q.clone(),
                    b"{elsewhere}".to_vec(),
                    "event for az://c/one/a is in a bucket no pair follows".into()
                ),
            ]
        );
        assert_eq!(got[3].0, Some(one), "{:?}", got[3]);
        assert_eq!(got.len(), 4);
        assert_eq!(fan.dead_lettered.load(Relaxed), 4);
        assert_eq!(fan.outside.load(Relaxed), 1);
        let targets = fan.targets();
        for t in &targets {
            assert_eq!(t.stats.outside.load(Relaxed), 1, "pair {}", t.pair_id);
        }
        // counted under the pair it belongs to, not under every pair
        assert_eq!(inbox.stats(one).unwrap().dead_letters, 1);
        assert_eq!(inbox.stats(two).unwrap().dead_letters, 0);

        // with no pair following, the message is one dead letter saying so first
        let lonely = Fanout::new(db.clone(), "az", "/events/eventgrid");
        lonely
            .store(
                "webhook-eventgrid",
                vec![Received::new(
                    raw.clone(),
                    Ok(Parsed::Batch(vec![
                        Parsed::Events(vec![ev("b", "x", EventKind::Upsert)]),
                        Parsed::Invalid("[0].data: missing".into()),
                    ])),
                )],
            )
            .await
            .unwrap();
        let last = dead_letters(&db).pop().unwrap();
        assert_eq!(
            last.4,
            "no az:// pair follows webhook-eventgrid; event for az://b/x is in a bucket no pair follows; [0].data: missing"
        );
        assert_eq!(last.2, "/events/eventgrid");
    }

    #[test]
    fn batches_handshakes_ignores_and_tokens() {
        let scope = Scope {
            bucket: "b".into(),
            prefix: String::new(),
        };
        let mut up = ev("b", "k", EventKind::Upsert);
        up.sequencer = Some(Token::Gcs {
            generation: 7,
            metageneration: 1,
        });
        let mut r = Routed::default();
        r.add(
            Parsed::Batch(vec![
                Parsed::Events(vec![up]),
                Parsed::PrefixReconcile {
                    bucket: "b".into(),
                    prefix: "d/".into(),
                },
            ]),
            &scope,
            "gs",
        );
        r.add(Parsed::Ignore("s3:TestEvent"), &scope, "s3");
        r.add(
            Parsed::Handshake {
                validation_code: "abc".into(),
            },
            &scope,
            "az",
        );
        assert_eq!(
            r.rows,
            vec![(
                "k".to_string(),
                Kind::Upsert,
                Some("00000000000000000007.00000000000000000001.0".into()),
                None
            )]
        );
        assert_eq!(r.prefixes, vec!["d/".to_string()]);
        assert_eq!(r.ignored, 2);
        assert_eq!(r.handshake.as_deref(), Some("abc"));
        // tokens keep their order as text
        let t = |g, m, kind: EventKind| {
            token_text(
                &Token::Gcs {
                    generation: g,
                    metageneration: m,
                },
                &kind,
            )
        };
        use EventKind::{Delete, Upsert};
        assert!(t(10, 1, Upsert) > t(9, 99, Delete));
        assert!(t(10, 2, Upsert) > t(10, 1, Upsert));
        // GCS: the delete of generation 10 follows its create; a re-create (11) follows both
        assert!(t(10, 1, Delete) > t(10, 1, Upsert));
        assert!(t(11, 1, Upsert) > t(10, 1, Delete));
        let s3 = |h: &str| token_text(&Token::S3(h.into()), &Upsert);
        assert!(
            s3("0A1") > s3("9f"),
            "shorter hex is padded, not compared as text"
        );
        assert_eq!(s3("abc"), s3("0ABC"));
    }
}
