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
use crate::state::inbox::{Inbox, Intake, Kind};
use crate::state::manifest::Manifest;

/// One inbox row to be: key relative to the pair's prefix, what happened, ordering token.
pub type Row = (String, Kind, Option<String>);

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
    /// Reasons, one per event that belongs to no pair (the message is stored once per reason).
    pub dead: Vec<String>,
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
                            self.rows.push((rel.to_string(), kind, token));
                        }
                        None => self.dead.push(format!(
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
                    None => self.dead.push(format!(
                        "directory event for {what}://{bucket}/{prefix} is outside the pair's source {what}://{}/{}",
                        scope.bucket, scope.prefix
                    )),
                }
            }
        }
    }
}

/// Reasons for the events of `parsed` that none of `scopes` takes, and for its malformed ones
/// (the dead letters of a delivery that several pairs share).
pub fn strangers(parsed: &Parsed, scopes: &[Scope], what: &str) -> Vec<String> {
    let mut out = Vec::new();
    match parsed {
        Parsed::Events(evs) => {
            for ev in evs {
                if !scopes.iter().any(|s| s.rel(&ev.bucket, &ev.key).is_some()) {
                    out.push(format!(
                        "event for {what}://{}/{} is outside every pair's source",
                        ev.bucket, ev.key
                    ));
                }
            }
        }
        Parsed::Batch(items) => {
            for p in items {
                out.extend(strangers(p, scopes, what));
            }
        }
        Parsed::PrefixReconcile { bucket, prefix } => {
            if !scopes
                .iter()
                .any(|s| s.rel_prefix(bucket, prefix).is_some())
            {
                out.push(format!(
                    "directory event for {what}://{bucket}/{prefix} is outside every pair's source"
                ));
            }
        }
        Parsed::Invalid(why) => out.push(why.clone()),
        Parsed::Ignore(_) | Parsed::Handshake { .. } => {}
    }
    out
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
    targets: RwLock<Vec<Target>>,
    /// Dead letters stored by this fan-out (messages no pair could use).
    pub dead_lettered: AtomicU64,
}

impl std::fmt::Debug for Fanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fanout")
            .field("what", &self.what)
            .field("targets", &self.targets().len())
            .finish()
    }
}

impl Fanout {
    pub fn new(db: Arc<Manifest>, what: &'static str) -> Arc<Fanout> {
        Arc::new(Fanout {
            db,
            what,
            targets: RwLock::new(Vec::new()),
            dead_lettered: AtomicU64::new(0),
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

    /// Routes and stores a batch of messages (raw text, what the parser made of it) in one
    /// transaction: each pair's rows and prefixes, and a dead letter (with the raw text) per
    /// reason no pair could use, each malformed event of a message ([`Parsed::Invalid`])
    /// included. Only after this returns Ok may the messages be acknowledged.
    pub async fn store(
        &self,
        source: &'static str,
        batch: Vec<(Vec<u8>, std::result::Result<Parsed, String>)>,
    ) -> Result<()> {
        let targets = self.targets();
        let mut intake = Intake::default();
        let mut touched = vec![(0u64, 0u64, 0u64, 0u64); targets.len()];
        for (raw, parsed) in batch {
            let parsed = match parsed {
                Ok(Parsed::Ignore(_) | Parsed::Handshake { .. }) => {
                    // well-formed, nothing to do (test events, overwrites' deletes, handshakes)
                    for c in touched.iter_mut() {
                        c.2 += 1;
                    }
                    continue;
                }
                Ok(p) => p,
                Err(why) => {
                    intake.dead.push((None, source.to_string(), raw, why));
                    continue;
                }
            };
            if targets.is_empty() {
                let why = format!("no {}:// pair follows {source}", self.what);
                // and the message's malformed events, each with its reason
                let invalid = match &parsed {
                    Parsed::Batch(items) => items.iter().collect(),
                    one => vec![one],
                };
                for p in invalid {
                    if let Parsed::Invalid(bad) = p {
                        intake
                            .dead
                            .push((None, source.to_string(), raw.clone(), bad.clone()));
                    }
                }
                intake.dead.push((None, source.to_string(), raw, why));
                continue;
            }
            let scopes: Vec<Scope> = targets.iter().map(|t| t.scope.clone()).collect();
            for why in strangers(&parsed, &scopes, self.what) {
                intake
                    .dead
                    .push((None, source.to_string(), raw.clone(), why));
            }
            for (i, t) in targets.iter().enumerate() {
                let mut routed = Routed::default();
                routed.add(parsed.clone(), &t.scope, self.what);
                let named = !routed.rows.is_empty() || !routed.prefixes.is_empty();
                let c = &mut touched[i];
                c.0 += u64::from(named);
                c.1 += routed.rows.len() as u64;
                c.2 += routed.ignored;
                c.3 += routed.prefixes.len() as u64;
                // unaddressable keys of this pair (never applied, kept with their reason)
                for why in routed
                    .dead
                    .into_iter()
                    .filter(|w| !w.contains("outside the pair"))
                {
                    intake
                        .dead
                        .push((Some(t.pair_id), source.to_string(), raw.clone(), why));
                }
                intake.rows.extend(
                    routed
                        .rows
                        .into_iter()
                        .map(|(k, kind, tok)| (t.pair_id, k, kind, tok)),
                );
                intake
                    .prefixes
                    .extend(routed.prefixes.into_iter().map(|p| (t.pair_id, p)));
            }
        }
        let dead = intake.dead.len() as u64;
        let db = self.db.clone();
        crate::state::blocking(move || Inbox::new(&db).store(&intake)).await?;
        self.dead_lettered.fetch_add(dead, Relaxed);
        let now = crate::core::metrics::unix_ms();
        for (t, (msgs, rows, ignored, prefixes)) in targets.iter().zip(touched) {
            t.stats.messages.fetch_add(msgs, Relaxed);
            t.stats.events.fetch_add(rows, Relaxed);
            t.stats.ignored.fetch_add(ignored, Relaxed);
            t.stats.prefixes.fetch_add(prefixes, Relaxed);
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
                    assert_eq!(r.rows, vec![(rel.to_string(), Kind::Delete, None)]);
                    assert!(r.dead.is_empty());
                }
                None => {
                    assert!(r.rows.is_empty());
                    assert_eq!(r.dead.len(), 1, "{bucket}/{key}");
                    assert!(r.dead[0].contains(key), "{}", r.dead[0]);
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
        assert_eq!(r.rows, vec![("k".to_string(), Kind::Upsert, None)]);
        assert!(r.dead.is_empty() && r.prefixes.is_empty(), "{r:?}");
        assert_eq!(r.ignored, 0);
        assert_eq!(
            strangers(&parsed, std::slice::from_ref(&scope), "az"),
            vec![
                "[1].subject: missing".to_string(),
                "[2]: expected an object, found null".to_string()
            ]
        );
    }

    /// (pair, source, raw, reason) of every dead letter, in order.
    fn dead_letters(db: &Manifest) -> Vec<(Option<i64>, String, Vec<u8>, String)> {
        db.read(|c| {
            c.query_map(
                "SELECT pair_id, source, raw, reason FROM dead_letters ORDER BY id",
                crate::state::db::params![],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
        })
        .unwrap()
    }

    #[tokio::test]
    async fn fanout_stores_the_good_events_and_dead_letters_each_bad_one() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Manifest::open(&dir.path().join("s.db")).unwrap());
        let one = db.pair("az://b/one", "/tmp/one").unwrap().id;
        let two = db.pair("az://b/two", "/tmp/two").unwrap().id;
        let fan = Fanout::new(db.clone(), "az");
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
        // a batch of three whose middle event is malformed, then a message that failed whole
        let raw = b"[{...}, {...}, {...}]".to_vec();
        let batch = Parsed::Batch(vec![
            Parsed::Events(vec![
                ev("b", "one/a", EventKind::Upsert),
                ev("b", "two/c", EventKind::Delete),
            ]),
            Parsed::Invalid("[1].subject: missing".into()),
        ]);
        fan.store(
            "azqueue",
            vec![
                (raw.clone(), Ok(batch)),
                (b"garbage".to_vec(), Err("body: not JSON".into())),
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
        // one dead letter per malformed event (not one per pair), with the raw message
        assert_eq!(
            dead_letters(&db),
            vec![
                (
                    None,
                    "azqueue".into(),
                    raw.clone(),
                    "[1].subject: missing".into()
                ),
                (
                    None,
                    "azqueue".into(),
                    b"garbage".to_vec(),
                    "body: not JSON".into()
                ),
            ]
        );
        assert_eq!(fan.dead_lettered.load(Relaxed), 2);
        let targets = fan.targets();
        for t in &targets {
            assert_eq!(t.stats.events.load(Relaxed), 1, "pair {}", t.pair_id);
            assert_eq!(t.stats.messages.load(Relaxed), 1, "pair {}", t.pair_id);
        }

        // with no pair following, the message is dead-lettered with each bad event's reason too
        let lonely = Fanout::new(db.clone(), "az");
        lonely
            .store(
                "webhook-eventgrid",
                vec![(
                    raw.clone(),
                    Ok(Parsed::Batch(vec![
                        Parsed::Events(vec![ev("b", "x", EventKind::Upsert)]),
                        Parsed::Invalid("[0].data: missing".into()),
                    ])),
                )],
            )
            .await
            .unwrap();
        let reasons: Vec<String> = dead_letters(&db)[2..].iter().map(|d| d.3.clone()).collect();
        assert_eq!(
            reasons,
            vec![
                "[0].data: missing".to_string(),
                "no az:// pair follows webhook-eventgrid".to_string()
            ]
        );
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
                Some("00000000000000000007.00000000000000000001.0".into())
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
