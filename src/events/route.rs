//! From parsed cloud messages to inbox rows: every event source (SQS, a Storage Queue, the
//! webhook, Pub/Sub) sorts what a message names into the keys of a pair (relative to the
//! pair's prefix), dead letters (a key of no pair, a malformed message), prefixes to
//! reconcile as a whole, and the events it may ignore; then stores all of it in one
//! transaction before it acknowledges the message (DESIGN.md rule 2).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::{EventKind, Parsed, Token};
use crate::copy::list::{self, Entry};
use crate::copy::side::Side;
use crate::error::Result;
use crate::inbox::{Inbox, Kind};
use crate::location::Location;
use crate::manifest::{self, Manifest};

/// One inbox row to be: key relative to the pair's prefix, what happened, ordering token.
pub type Row = (String, Kind, Option<String>);

/// Counters of one event source, for health lines and metrics.
#[derive(Debug, Default)]
pub struct SourceStats {
    /// Cloud messages received.
    pub messages: AtomicU64,
    /// Key events stored in the inbox.
    pub events: AtomicU64,
    /// Well-formed messages that named nothing to do (test events, overwrites, handshakes).
    pub ignored: AtomicU64,
    pub dead_lettered: AtomicU64,
    /// Prefixes reconciled as a whole (directory renames and deletes).
    pub prefixes: AtomicU64,
}

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
                                crate::copy::side::unaddressable(rel)
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

/// Reasons for the events of `parsed` that none of `scopes` takes (the dead letters of a
/// delivery that several pairs share).
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
        Parsed::Ignore(_) | Parsed::Handshake { .. } => {}
    }
    out
}

/// A pair as an event source sees it: where to store its events, and its source (to expand
/// prefix events by listing).
#[derive(Clone)]
pub struct Target {
    pub manifest: Arc<Manifest>,
    pub pair_id: i64,
    pub src: Side,
    /// The pair's daemon counters (when its events were last stored).
    pub daemon: Arc<crate::reconcile::daemon::DaemonStats>,
}

impl Target {
    pub fn scope(&self) -> Scope {
        Scope::of(self.src.location())
    }

    /// Stores one message's worth of routing durably: see [`Target::store_batch`].
    pub async fn store(
        &self,
        source: &'static str,
        raw: &[u8],
        routed: Routed,
        stats: &SourceStats,
    ) -> Result<()> {
        self.store_batch(source, vec![(raw.to_vec(), routed)], stats)
            .await
    }

    /// Stores the routing of a batch of messages (raw text, routing) durably, in one inbox
    /// transaction: the rows, a row per key under each prefix (listed at the source now, plus
    /// what the manifest recorded there, so renames away and deletions are seen), and dead
    /// letters with their message's raw text. Only after this returns Ok may the messages be
    /// acknowledged.
    pub async fn store_batch(
        &self,
        source: &'static str,
        batch: Vec<(Vec<u8>, Routed)>,
        stats: &SourceStats,
    ) -> Result<()> {
        let mut rows = Vec::new();
        let mut dead = Vec::new();
        for (raw, routed) in batch {
            rows.extend(routed.rows);
            for p in &routed.prefixes {
                rows.extend(self.expand_prefix(p).await?);
            }
            stats.ignored.fetch_add(routed.ignored, Relaxed);
            stats
                .prefixes
                .fetch_add(routed.prefixes.len() as u64, Relaxed);
            dead.extend(routed.dead.into_iter().map(|why| (raw.clone(), why)));
        }
        stats.events.fetch_add(rows.len() as u64, Relaxed);
        stats.dead_lettered.fetch_add(dead.len() as u64, Relaxed);
        let (m, pair_id) = (self.manifest.clone(), self.pair_id);
        let stored = !rows.is_empty();
        crate::reconcile::blocking(move || {
            let ib = Inbox::new(&m);
            ib.push(pair_id, &rows)?;
            for (raw, why) in dead {
                ib.dead_letter(Some(pair_id), source, &raw, &why)?;
            }
            Ok(())
        })
        .await?;
        if stored {
            self.daemon
                .last_event_ms
                .store(crate::metrics::unix_ms(), Relaxed);
        }
        Ok(())
    }

    /// Every key under `rel_prefix` that the source lists now or the manifest recorded.
    async fn expand_prefix(&self, rel_prefix: &str) -> Result<Vec<Row>> {
        let mut loc = self.src.location().clone();
        let sub = rel_prefix.trim_end_matches('/');
        let base = loc.prefix.clone();
        if !sub.is_empty() {
            loc.prefix = if base.is_empty() {
                sub.to_string()
            } else {
                format!("{base}/{sub}")
            };
        }
        let side = self.src.with_loc(loc);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Entry>>(256);
        let lister = tokio::spawn(async move {
            list::list_entries(&side, tx, crate::copy::classify_store_error).await
        });
        let mut rows = Vec::new();
        let join = |rel: &str| {
            if sub.is_empty() {
                rel.to_string()
            } else {
                format!("{sub}/{rel}")
            }
        };
        while let Some(e) = rx.recv().await {
            rows.push((join(&e?.rel), Kind::Upsert, None));
        }
        lister.await.map_err(|e| crate::error::SlateError::List {
            url: self.src.location().to_string(),
            detail: e.to_string(),
        })??;
        let (m, pair_id, under) = (self.manifest.clone(), self.pair_id, sub.to_string());
        let recorded =
            crate::reconcile::blocking(move || m.keys_under(pair_id, manifest::Side::Src, &under))
                .await?;
        rows.extend(recorded.into_iter().map(|k| (k, Kind::Delete, None)));
        Ok(rows)
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
