//! The event property's model: a source folder mutated by random histories, the events its
//! provider sends for each change, their delivery (duplicated, reordered, batched) through the
//! real parsers, router and inbox, and the daemon's apply to a destination folder, with the
//! checks made after every applied key and at the end.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::json;

use slate::copy::transfer::Ctx;
use slate::copy::{CopyOptions, Counters, ProgressMode};
use slate::core::location::Location;
use slate::engine::expand::Expander;
use slate::engine::key::{Applied, Engine};
use slate::events::route::{Fanout, IntakeStats, Received, Routed, Scope, Target};
use slate::events::{self, Parsed};
use slate::state::inbox::Inbox;
use slate::state::manifest::Manifest;

use crate::render::{azure_event, b64, gcs_message, s3_eventbridge, s3_record, sns};
use crate::{count, fail, SEEN};

/// Keys of the source, relative to the pair: a nested one, a space and a plus (form-encoded
/// by S3), a literal `%`, and a non-ASCII one.
pub(crate) const KEYS: &[&str] = &["a", "dir/b c+d", "dir/é", "z%41"];

/// The bucket (or container) all events name.
pub(crate) const BUCKET: &str = "src-bucket";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Provider {
    /// S3 notifications with sequencers (AWS): raw, SNS-wrapped or EventBridge-shaped.
    S3,
    /// S3 notifications without sequencers, as moto sends them.
    S3Moto,
    /// Azure Blob events: Event Grid schema or CloudEvents, webhook batch or Storage Queue.
    Azure,
    /// GCS notifications carrying the object resource (payload format JSON_API_V1).
    Gcs,
    /// GCS notifications with payload format NONE: attributes only.
    GcsBare,
}

impl Provider {
    fn is_gcs(self) -> bool {
        matches!(self, Provider::Gcs | Provider::GcsBare)
    }

    fn what(self) -> &'static str {
        match self {
            Provider::S3 | Provider::S3Moto => "s3",
            Provider::Azure => "az",
            Provider::Gcs | Provider::GcsBare => "gs",
        }
    }
}

/// One change of the source.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mut {
    /// Create or overwrite `KEYS[key]`; `len` pads the content (few values: same-size
    /// overwrites are common).
    Write {
        key: usize,
        len: usize,
    },
    Delete {
        key: usize,
    },
    /// A metadata update (GCS: a new metageneration; the object's change token moves, its
    /// content does not). Other providers: nothing happens.
    Meta {
        key: usize,
    },
    /// Azure hierarchical namespace: the folder `dir` deleted as a whole, announced by one
    /// `DirectoryDeleted` event (only in the Azure directory variant).
    DeleteDir,
}

#[derive(Debug, Clone)]
pub(crate) enum Step {
    Mutate(Mut),
    /// Delivers some of the events in flight: each pick takes the event at `index % window`
    /// (so events overtake each other within the window), and with `again` leaves a copy
    /// behind to be delivered once more later (at-least-once delivery). With `one_message`
    /// the picks travel in one message where the provider batches (S3 `Records`, an Event
    /// Grid array); `shape` chooses the envelope.
    Deliver {
        picks: Vec<(u16, bool)>,
        window: usize,
        one_message: bool,
        shape: u8,
    },
    /// Shuffles every event in flight.
    Shuffle(u64),
    /// Takes up to `batch` keys from the inbox and applies them as the daemon does; `mid`
    /// changes the source after the first key of the batch was applied.
    Reconcile {
        batch: usize,
        mid: Option<Mut>,
    },
}

/// One event as the provider would send it, before rendering.
#[derive(Debug, Clone)]
pub(crate) struct Ev {
    pub(crate) key: usize,
    pub(crate) kind: EvKind,
    /// The provider's ordering value: S3 and Azure sequencer, GCS generation.
    pub(crate) seq: u64,
    /// GCS metageneration.
    pub(crate) meta: u64,
    pub(crate) size: usize,
    /// GCS: the generation this finalize replaced, or that replaced this deleted one.
    pub(crate) overwrote: Option<u64>,
    pub(crate) overwritten_by: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EvKind {
    Created,
    Deleted,
    MetaUpdated,
    DirDeleted,
}

#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    pub(crate) provider: Provider,
    pub(crate) prefix: &'static str,
    pub(crate) steps: Vec<Step>,
    /// How the leftover events are delivered at the end: one at a time from this index.
    pub(crate) tail_order: Vec<u16>,
}

fn mut_strategy(dirs: bool) -> BoxedStrategy<Mut> {
    let n = KEYS.len();
    let base = prop_oneof![
        4 => (0..n, 0..3usize).prop_map(|(key, len)| Mut::Write { key, len }),
        3 => (0..n).prop_map(|key| Mut::Delete { key }),
        2 => (0..n).prop_map(|key| Mut::Meta { key }),
    ];
    if dirs {
        prop_oneof![8 => base, 1 => Just(Mut::DeleteDir)].boxed()
    } else {
        base.boxed()
    }
}

fn step_strategy(dirs: bool) -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => mut_strategy(dirs).prop_map(Step::Mutate),
        5 => (
            prop::collection::vec((any::<u16>(), prop::bool::weighted(0.25)), 1..5),
            1..6usize,
            any::<bool>(),
            any::<u8>()
        )
            .prop_map(|(picks, window, one_message, shape)| Step::Deliver {
                picks,
                window,
                one_message,
                shape,
            }),
        1 => any::<u64>().prop_map(Step::Shuffle),
        3 => (1..5usize, prop::option::weighted(0.3, mut_strategy(dirs)))
            .prop_map(|(batch, mid)| Step::Reconcile { batch, mid }),
    ]
}

pub(crate) fn scenario_strategy(
    providers: Vec<Provider>,
    dirs: bool,
) -> impl Strategy<Value = Scenario> {
    (
        prop::sample::select(providers),
        prop::sample::select(vec!["", "pfx"]),
        prop::collection::vec(step_strategy(dirs), 1..40),
        prop::collection::vec(any::<u16>(), 0..8),
    )
        .prop_map(|(provider, prefix, steps, tail_order)| Scenario {
            provider,
            prefix,
            steps,
            tail_order,
        })
}

/// What the source holds for one key.
#[derive(Debug, Clone)]
struct Obj {
    /// The sequence number of the write that made it (its GCS generation).
    version: u64,
    meta: u64,
    len: usize,
}

/// The real pieces of one run: folders, manifest, inbox target, copy context.
struct Env {
    _dir: tempfile::TempDir,
    src_root: PathBuf,
    dst_root: PathBuf,
    manifest: Arc<Manifest>,
    pair: i64,
    engine: Engine,
    /// Prefix events (Azure directory deletes) are expanded as the daemon does, a page a step.
    expander: Expander,
    fanout: Arc<Fanout>,
    scope: Scope,
}

impl Env {
    /// A new pair of folders, as a new pair of the one manifest all cases share (as the
    /// pairs of one daemon do: everything is keyed by pair).
    async fn new(prefix: &str, manifest: &Arc<Manifest>) -> Result<Env, TestCaseError> {
        let dir = tempfile::tempdir().map_err(|e| fail(e.to_string()))?;
        let src_root = dir.path().join("src");
        let dst_root = dir.path().join("dst");
        for d in [&src_root, &dst_root] {
            std::fs::create_dir_all(d).map_err(|e| fail(e.to_string()))?;
        }
        let loc = |p: &Path| Location::parse(&format!("{}/", p.display()));
        let src_loc = loc(&src_root).map_err(|e| fail(e.to_string()))?;
        let dst_loc = loc(&dst_root).map_err(|e| fail(e.to_string()))?;
        let manifest = manifest.clone();
        let pair = manifest
            .pair(&src_loc.to_string(), &dst_loc.to_string())
            .map_err(|e| fail(e.to_string()))?
            .id;
        let plan = slate::copy::plan(&src_loc, &dst_loc)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let opts = CopyOptions {
            transfers: Some(1),
            streams: Some(1),
            progress: ProgressMode::Quiet,
            ..CopyOptions::default()
        };
        let ctx = Arc::new(Ctx::new(&plan, opts, Arc::new(Counters::default())).expect("ctx"));
        let engine = Engine::new(manifest.clone(), pair, ctx, dst_loc.clone());
        let expander = Expander::new(manifest.clone(), pair, plan.src.clone());
        let scope = Scope {
            bucket: BUCKET.into(),
            prefix: prefix.into(),
        };
        let fanout = Fanout::new(manifest.clone(), "s3", "test");
        fanout.add(Target {
            pair_id: pair,
            scope: scope.clone(),
            stats: Arc::new(IntakeStats::default()),
        });
        Ok(Env {
            _dir: dir,
            src_root,
            dst_root,
            manifest,
            pair,
            engine,
            expander,
            fanout,
            scope,
        })
    }
}

/// The model: what the source holds, what every version contained, what is in flight.
struct World {
    provider: Provider,
    prefix: &'static str,
    seq: u64,
    src: BTreeMap<usize, Obj>,
    /// For keys the source does not have: the sequence number of their delete.
    deleted_at: HashMap<usize, u64>,
    /// Every version's content, to tell a whole version from a torn or invented one.
    contents: HashMap<u64, Vec<u8>>,
    /// Events sent by the cloud and not delivered yet.
    in_flight: Vec<Ev>,
    /// Per key, the newest source state the destination has shown: a version, or the delete
    /// it applied. It may never go back.
    floor: HashMap<usize, u64>,
    /// Per key, whether the destination held it after the last apply.
    dst_has: HashMap<usize, bool>,
}

fn content(key: usize, version: u64, len: usize) -> Vec<u8> {
    // fixed width: contents of one `len` have one size, so same-size overwrites happen
    format!("{key}:{version:08}:{}", "x".repeat(len * 3)).into_bytes()
}

fn version_of(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes)
        .ok()?
        .split(':')
        .nth(1)?
        .parse()
        .ok()
}

impl World {
    fn new(provider: Provider, prefix: &'static str) -> World {
        World {
            provider,
            prefix,
            seq: 0,
            src: BTreeMap::new(),
            deleted_at: HashMap::new(),
            contents: HashMap::new(),
            in_flight: Vec::new(),
            floor: HashMap::new(),
            dst_has: HashMap::new(),
        }
    }

    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn full_key(&self, key: usize) -> String {
        if self.prefix.is_empty() {
            KEYS[key].to_string()
        } else {
            format!("{}/{}", self.prefix, KEYS[key])
        }
    }

    /// Applies `m` to the source folder and queues the events the cloud sends for it.
    fn mutate(&mut self, env: &Env, m: Mut) -> Result<(), TestCaseError> {
        let io = |e: std::io::Error| fail(format!("source: {e}"));
        match m {
            Mut::Write { key, len } => {
                let version = self.next();
                let bytes = content(key, version, len);
                let path = env.src_root.join(KEYS[key]);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(io)?;
                }
                std::fs::write(&path, &bytes).map_err(io)?;
                touch(&path, version).map_err(io)?;
                let old = self.src.insert(
                    key,
                    Obj {
                        version,
                        meta: 1,
                        len,
                    },
                );
                self.deleted_at.remove(&key);
                self.in_flight.push(Ev {
                    key,
                    kind: EvKind::Created,
                    seq: version,
                    meta: 1,
                    size: bytes.len(),
                    overwrote: old.as_ref().map(|o| o.version),
                    overwritten_by: None,
                });
                if let (Some(old), true) = (old, self.provider.is_gcs()) {
                    // GCS's overwrite pair: the old generation's DELETE, which is no delete
                    self.in_flight.push(Ev {
                        key,
                        kind: EvKind::Deleted,
                        seq: old.version,
                        meta: old.meta,
                        size: content(key, old.version, old.len).len(),
                        overwrote: None,
                        overwritten_by: Some(version),
                    });
                }
                self.contents.insert(version, bytes);
            }
            Mut::Delete { key } => {
                let Some(old) = self.src.remove(&key) else {
                    if matches!(self.provider, Provider::S3 | Provider::S3Moto) {
                        // S3 answers 204 and notifies a delete of a key it does not have
                        let seq = self.next();
                        self.deleted_at.insert(key, seq);
                        self.in_flight.push(delete_event(key, seq, 1));
                    }
                    return Ok(());
                };
                std::fs::remove_file(env.src_root.join(KEYS[key])).map_err(io)?;
                let seq = self.next();
                self.deleted_at.insert(key, seq);
                // GCS names the generation it deleted; the others send a new sequencer
                let (token, meta) = if self.provider.is_gcs() {
                    (old.version, old.meta)
                } else {
                    (seq, 1)
                };
                self.in_flight.push(delete_event(key, token, meta));
            }
            Mut::Meta { key } => {
                if !self.provider.is_gcs() {
                    return Ok(());
                }
                let Some(obj) = self.src.get_mut(&key) else {
                    return Ok(());
                };
                obj.meta += 1;
                let (version, meta, len) = (obj.version, obj.meta, obj.len);
                // the object's change token moves: a new mtime stands for GCS's new etag
                let stamp = self.next();
                touch(&env.src_root.join(KEYS[key]), stamp).map_err(io)?;
                self.in_flight.push(Ev {
                    key,
                    kind: EvKind::MetaUpdated,
                    seq: version,
                    meta,
                    size: content(key, version, len).len(),
                    overwrote: None,
                    overwritten_by: None,
                });
            }
            Mut::DeleteDir => {
                let in_dir: Vec<usize> = self
                    .src
                    .keys()
                    .copied()
                    .filter(|k| KEYS[*k].starts_with("dir/"))
                    .collect();
                if in_dir.is_empty() {
                    return Ok(());
                }
                let seq = self.next();
                for k in in_dir {
                    self.src.remove(&k);
                    self.deleted_at.insert(k, seq);
                }
                std::fs::remove_dir_all(env.src_root.join("dir")).map_err(io)?;
                self.in_flight.push(Ev {
                    key: 1,
                    kind: EvKind::DirDeleted,
                    seq,
                    meta: 1,
                    size: 0,
                    overwrote: None,
                    overwritten_by: None,
                });
            }
        }
        Ok(())
    }

    /// Delivers the events at `picks` (see [`Step::Deliver`]) through parser, router and
    /// inbox.
    async fn deliver(
        &mut self,
        env: &Env,
        picks: &[(u16, bool)],
        window: usize,
        one_message: bool,
        shape: u8,
    ) -> Result<(), TestCaseError> {
        let mut evs = Vec::new();
        for (index, again) in picks {
            if self.in_flight.is_empty() {
                break;
            }
            let i = *index as usize % window.min(self.in_flight.len());
            let ev = if *again {
                count(&SEEN.redelivered);
                // delivered now and once more later, further back in the queue
                let ev = self.in_flight[i].clone();
                let back = (i + 1 + *index as usize % 7).min(self.in_flight.len());
                self.in_flight.insert(back, ev.clone());
                self.in_flight.remove(i)
            } else {
                self.in_flight.remove(i)
            };
            evs.push(ev);
        }
        if evs.is_empty() {
            return Ok(());
        }
        let groups: Vec<Vec<Ev>> = if one_message {
            vec![evs]
        } else {
            evs.into_iter().map(|e| vec![e]).collect()
        };
        let mut batch = Vec::new();
        for group in groups {
            for (raw, parsed) in self.render(&group, shape)? {
                let mut routed = Routed::default();
                routed.add(parsed.clone(), &env.scope, self.provider.what());
                if !routed.dead.is_empty() {
                    return Err(fail(format!("dead letters: {:?}", routed.dead)));
                }
                batch.push(Received::new(raw, Ok(parsed)));
            }
        }
        env.fanout
            .store("test", batch)
            .await
            .map_err(|e| fail(format!("storing events: {e}")))
    }

    /// The cloud messages carrying `group`, parsed by slate's parser for the provider.
    fn render(&self, group: &[Ev], shape: u8) -> Result<Vec<(Vec<u8>, Parsed)>, TestCaseError> {
        let parsed = |r: Result<Parsed, events::ParseError>, raw: &str| {
            r.map_err(|e| fail(format!("parse error {e} for {raw}")))
        };
        let mut out = Vec::new();
        match self.provider {
            Provider::S3 | Provider::S3Moto => {
                let with_seq = self.provider == Provider::S3;
                let bodies: Vec<String> = if shape % 3 == 2 {
                    group
                        .iter()
                        .map(|e| s3_eventbridge(&self.full_key(e.key), e, with_seq))
                        .collect()
                } else {
                    let records: Vec<_> = group
                        .iter()
                        .map(|e| s3_record(&self.full_key(e.key), e, with_seq, shape))
                        .collect();
                    let body = json!({ "Records": records }).to_string();
                    vec![if shape % 3 == 1 { sns(&body) } else { body }]
                };
                for b in bodies {
                    out.push((b.clone().into_bytes(), parsed(events::parse_s3(&b), &b)?));
                }
            }
            Provider::Azure => {
                let cloud_events = shape % 3 == 1;
                let items: Vec<_> = group
                    .iter()
                    .map(|e| azure_event(&self.full_key(e.key), e, cloud_events))
                    .collect();
                if shape % 3 == 2 {
                    // a Storage Queue: one event per message, base64 of its JSON
                    for item in items {
                        let text = b64(item.to_string().as_bytes());
                        let json = events::decode_queue_message(&text)
                            .map_err(|e| fail(format!("queue message: {e}")))?;
                        out.push((
                            text.into_bytes(),
                            parsed(events::parse_eventgrid(&json), &json)?,
                        ));
                    }
                } else {
                    let body = serde_json::Value::Array(items).to_string();
                    out.push((
                        body.clone().into_bytes(),
                        parsed(events::parse_eventgrid(&body), &body)?,
                    ));
                }
            }
            Provider::Gcs | Provider::GcsBare => {
                for e in group {
                    let (attrs, data) = gcs_message(
                        &self.full_key(e.key),
                        e,
                        self.provider == Provider::Gcs,
                        shape,
                    );
                    let p = events::parse_gcs(&attrs, data.as_bytes());
                    if e.overwritten_by.is_some() {
                        if p != Ok(Parsed::Ignore("overwritten")) {
                            return Err(fail(format!(
                                "the DELETE of an overwritten generation was not ignored: {p:?}"
                            )));
                        }
                        count(&SEEN.overwrite_pairs);
                    }
                    out.push((data.into_bytes(), parsed(p, &format!("{attrs:?}"))?));
                }
            }
        }
        Ok(out)
    }

    /// Takes up to `batch` keys and applies them as the daemon's loop does.
    async fn reconcile(
        &mut self,
        env: &Env,
        batch: usize,
        mut mid: Option<Mut>,
    ) -> Result<usize, TestCaseError> {
        let db = |e: slate::SlateError| fail(format!("inbox: {e}"));
        // the daemon's loop: one step of each pending prefix expansion, then the keys
        while env.expander.step().await.map_err(db)? {}
        let inbox = Inbox::new(&env.manifest);
        let pending = inbox.take(env.pair, batch).map_err(db)?;
        for p in &pending {
            let applied = env
                .engine
                .reconcile_with_token(&p.key, p.token.as_deref())
                .await
                .map_err(|e| fail(format!("apply {} (token {:?}): {e}", p.key, p.token)))?;
            self.check_key(env, &p.key, applied)?;
            count(match applied {
                Applied::Copied { .. } => &SEEN.copied,
                Applied::Deleted => &SEEN.deleted,
                // the same bytes: with metadata brought up to date, or nothing to do
                Applied::Unchanged | Applied::MetaUpdated => &SEEN.unchanged,
                Applied::AlreadyGone => &SEEN.already_gone,
                Applied::Stale => &SEEN.stale,
                // the harness's pairs have no filter
                Applied::Filtered => {
                    return Err(fail(format!("{} filtered by a pair with no filter", p.key)))
                }
                // the harness's engines have no delete brake
                Applied::Held { .. } => {
                    return Err(fail(format!("{}: a delete held with no brake", p.key)))
                }
            });
            inbox.done(env.pair, &p.key, p.events).map_err(db)?;
            if let Some(m) = mid.take() {
                count(&SEEN.mid_batch_changes);
                self.mutate(env, m)?;
            }
        }
        Ok(pending.len())
    }

    /// The destination's copy of the key just applied: a whole version, not older than what
    /// it showed before, and gone only while the source has no such key.
    fn check_key(&mut self, env: &Env, rel: &str, applied: Applied) -> Result<(), TestCaseError> {
        let key = KEYS
            .iter()
            .position(|k| *k == rel)
            .ok_or_else(|| fail(format!("applied an unknown key {rel:?}")))?;
        let path = env.dst_root.join(rel);
        let floor = self.floor.get(&key).copied().unwrap_or(0);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let v = version_of(&bytes)
                    .filter(|v| self.contents.get(v) == Some(&bytes))
                    .ok_or_else(|| {
                        fail(format!(
                            "{rel}: destination holds no whole version: {bytes:?}"
                        ))
                    })?;
                if v < floor {
                    return Err(fail(format!(
                        "{rel}: destination went back to version {v} after showing {floor} \
                         ({applied:?})"
                    )));
                }
                self.floor.insert(key, v);
                self.dst_has.insert(key, true);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if self.dst_has.get(&key) == Some(&true) {
                    let Some(at) = self.deleted_at.get(&key).copied() else {
                        return Err(fail(format!(
                            "{rel}: deleted at the destination while the source has it \
                             ({applied:?})"
                        )));
                    };
                    if self.src.contains_key(&key) {
                        return Err(fail(format!("{rel}: deleted while the source has it")));
                    }
                    self.floor.insert(key, floor.max(at));
                }
                self.dst_has.insert(key, false);
            }
            Err(e) => return Err(fail(format!("{rel}: reading the destination: {e}"))),
        }
        Ok(())
    }
}

/// Sets a file's mtime from a sequence number: every write and metadata update gets its own,
/// as every cloud write gets its own ETag (the kernel's coarse clock could otherwise give two
/// same-size writes one local change token, a limit of local folders that is not under test).
fn touch(path: &Path, stamp: u64) -> std::io::Result<()> {
    let f = std::fs::File::options().write(true).open(path)?;
    f.set_modified(UNIX_EPOCH + Duration::from_secs(1_600_000_000 + stamp))
}

fn delete_event(key: usize, seq: u64, meta: u64) -> Ev {
    Ev {
        key,
        kind: EvKind::Deleted,
        seq,
        meta,
        size: 0,
        overwrote: None,
        overwritten_by: None,
    }
}

/// Every file under `root` (key → content); slate's temporary files are an error.
fn files(root: &Path) -> Result<BTreeMap<String, Vec<u8>>, TestCaseError> {
    fn walk(
        root: &Path,
        dir: &Path,
        out: &mut BTreeMap<String, Vec<u8>>,
    ) -> Result<(), TestCaseError> {
        let rd = std::fs::read_dir(dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
        for entry in rd {
            let entry = entry.map_err(|e| fail(e.to_string()))?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".slate-tmp-") {
                return Err(fail(format!("temporary file left: {}", path.display())));
            }
            if path.is_dir() {
                walk(root, &path, out)?;
            } else {
                let rel = path.strip_prefix(root).map_err(|e| fail(e.to_string()))?;
                let bytes = std::fs::read(&path).map_err(|e| fail(e.to_string()))?;
                out.insert(rel.to_string_lossy().into_owned(), bytes);
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out)?;
    Ok(out)
}

pub(crate) async fn run_scenario(
    sc: Scenario,
    manifest: &Arc<Manifest>,
) -> Result<(), TestCaseError> {
    let env = Env::new(sc.prefix, manifest).await?;
    let mut w = World::new(sc.provider, sc.prefix);
    for step in &sc.steps {
        match step {
            Step::Mutate(m) => w.mutate(&env, *m)?,
            Step::Deliver {
                picks,
                window,
                one_message,
                shape,
            } => {
                w.deliver(&env, picks, *window, *one_message, *shape)
                    .await?
            }
            Step::Shuffle(seed) => {
                let mut rng = fastrand::Rng::with_seed(*seed);
                rng.shuffle(&mut w.in_flight);
            }
            Step::Reconcile { batch, mid } => {
                w.reconcile(&env, *batch, *mid).await?;
            }
        }
    }
    // Every event still in flight arrives (one message each, in the tail's order), and the
    // daemon drains the inbox.
    let mut i = 0;
    while !w.in_flight.is_empty() {
        let index = sc.tail_order.get(i).copied().unwrap_or(0);
        let shape = (i % 7) as u8;
        w.deliver(&env, &[(index, false)], usize::MAX, false, shape)
            .await?;
        i += 1;
    }
    for round in 0.. {
        if w.reconcile(&env, 1_000, None).await? == 0 {
            break;
        }
        if round > 20 {
            return Err(fail("the inbox does not drain"));
        }
    }
    let src = files(&env.src_root)?;
    let dst = files(&env.dst_root)?;
    if src != dst {
        let show = |m: &BTreeMap<String, Vec<u8>>| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(v)))
                .collect::<Vec<_>>()
        };
        return Err(fail(format!(
            "after draining, the destination differs from the source\n  source:      {:?}\n  destination: {:?}",
            show(&src),
            show(&dst)
        )));
    }
    Ok(())
}
