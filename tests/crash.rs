//! SIGKILL at random moments, in seeded trials: `slate sync --once` and the daemon are killed
//! mid-run over a source that keeps changing, and after every kill the destination must show
//! no torn object (each one byte-identical to some version the source ever held at that key),
//! no stray file (only slate's own `.slate-tmp-*`, which the next run sweeps) and no delete of
//! a key the source still has; a rerun (or a restart) must then converge to the source exactly.
//!
//! Seeds: `SLATE_CRASH_SEED=N` (default below); a failing trial prints the seed and its number.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

const DEFAULT_SEED: u64 = 0x51A7_E0C4_A5E5;

fn base_seed() -> u64 {
    std::env::var("SLATE_CRASH_SEED")
        .ok()
        .and_then(|s| {
            let s = s.trim();
            match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        })
        .unwrap_or(DEFAULT_SEED)
}

/// xorshift64*: enough randomness for trials, reproducible from one number.
struct Rng(u64);

impl Rng {
    fn for_test(name: &str) -> Rng {
        let mut h: u64 = 0xCBF2_9CE4_8422_2325; // FNV-1a of the test's name
        for b in name.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3);
        }
        Rng((base_seed() ^ h) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Prints how to reproduce a failing test.
struct Repro {
    name: &'static str,
    trial: usize,
}

impl Drop for Repro {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "crash test {} failed in trial {}; reproduce with SLATE_CRASH_SEED={} cargo test --test crash {}",
                self.name,
                self.trial,
                base_seed(),
                self.name
            );
        }
    }
}

/// Files under `root` with size and mtime: what tells that a copy is under way.
fn local_state(root: &Path) -> BTreeMap<PathBuf, (u64, Option<std::time::SystemTime>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(md) = e.metadata() else { continue };
            if md.is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), (md.len(), md.modified().ok()));
            }
        }
    }
    out
}

/// SIGKILLs `child` `after_ms` after the first change under `root` (or after `limit_ms` when
/// none comes), unless it exits first: then how long it ran (ms).
fn kill_once_changed(child: &mut Child, root: &Path, after_ms: u64, limit_ms: u64) -> Option<u64> {
    let start = Instant::now();
    let before = local_state(root);
    let limit = start + Duration::from_millis(limit_ms);
    while Instant::now() < limit {
        if let Ok(Some(_)) = child.0.try_wait() {
            return Some(start.elapsed().as_millis() as u64);
        }
        if local_state(root) != before {
            break;
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    let waited = start.elapsed().as_millis() as u64;
    child.kill_after(after_ms).map(|t| t + waited)
}

/// (length, hash) of a content: what the history keeps instead of the bytes.
type Digest = (usize, u64);

fn digest(b: &[u8]) -> Digest {
    // word-wise FNV-style mixing: fast enough unoptimised for tens of MiB per check
    let mut h = 0xCBF2_9CE4_8422_2325 ^ b.len() as u64;
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x0100_0000_01B3).rotate_left(29);
    }
    for &byte in words.remainder() {
        h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01B3);
    }
    (b.len(), h)
}

fn is_temp(key: &str) -> bool {
    key.rsplit('/')
        .next()
        .is_some_and(|n| n.starts_with(".slate-tmp-"))
}

/// One end of a pair: a local folder or a prefix of a moto bucket.
enum Side {
    Local {
        root: PathBuf,
        /// where new versions are written before they are renamed in (same filesystem)
        staging: PathBuf,
    },
    S3 {
        bucket: String,
        prefix: String,
        store: Arc<dyn ObjectStore>,
        rt: Arc<tokio::runtime::Runtime>,
        /// key → (etag, digest) of what was read before: an unchanged object is not read again
        seen: Mutex<HashMap<String, (Option<String>, Digest)>>,
    },
}

impl Side {
    fn local(dir: &Path, name: &str) -> Side {
        let root = dir.join(name);
        let staging = dir.join(format!("{name}-staging"));
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::create_dir_all(&staging).expect("mkdir");
        Side::Local { root, staging }
    }

    fn s3(bucket: &str, name: &str, rt: &Arc<tokio::runtime::Runtime>) -> Side {
        Side::S3 {
            bucket: bucket.to_string(),
            prefix: unique(name),
            store: s3(bucket),
            rt: rt.clone(),
            seen: Mutex::default(),
        }
    }

    fn url(&self) -> String {
        match self {
            Side::Local { root, .. } => root.display().to_string(),
            Side::S3 { bucket, prefix, .. } => format!("s3://{bucket}/{prefix}"),
        }
    }

    /// Writes a whole new version of `key` (a local file appears complete, by rename).
    fn put(&self, key: &str, data: Vec<u8>) {
        match self {
            Side::Local { root, staging } => {
                let tmp = staging.join(format!("w{}", staging_name()));
                std::fs::write(&tmp, &data).expect("write");
                let p = root.join(key);
                std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
                std::fs::rename(&tmp, &p).expect("rename");
            }
            Side::S3 {
                prefix, store, rt, ..
            } => {
                let p = ObjPath::parse(format!("{prefix}/{key}")).expect("key");
                rt.block_on(store.put(&p, PutPayload::from(data)))
                    .expect("put");
            }
        }
    }

    fn delete(&self, key: &str) {
        match self {
            Side::Local { root, .. } => std::fs::remove_file(root.join(key)).expect("rm"),
            Side::S3 {
                prefix, store, rt, ..
            } => {
                let p = ObjPath::parse(format!("{prefix}/{key}")).expect("key");
                rt.block_on(store.delete(&p)).expect("delete");
            }
        }
    }

    /// The digest of every object (for a local folder: every file, hidden ones included).
    fn read(&self) -> BTreeMap<String, Digest> {
        match self {
            Side::Local { root, .. } => read_local(root)
                .into_iter()
                .map(|(k, v)| (k, digest(&v)))
                .collect(),
            Side::S3 {
                prefix,
                store,
                rt,
                seen,
                ..
            } => rt.block_on(async {
                let p = ObjPath::parse(prefix.as_str()).expect("prefix");
                let metas: Vec<_> = store.list(Some(&p)).try_collect().await.expect("list");
                let known = seen.lock().expect("lock").clone();
                let reads = metas.into_iter().map(|meta| {
                    let rel = meta.location.as_ref()[prefix.len() + 1..].to_string();
                    let cached = known.get(&rel).and_then(|(etag, d)| {
                        (*etag == meta.e_tag && d.0 as u64 == meta.size).then_some(*d)
                    });
                    async move {
                        if let Some(d) = cached {
                            return Some((rel, meta.e_tag, d));
                        }
                        match store.get(&meta.location).await {
                            Ok(r) => {
                                Some((rel, meta.e_tag, digest(&r.bytes().await.expect("body"))))
                            }
                            // deleted between the listing and the read
                            Err(object_store::Error::NotFound { .. }) => None,
                            Err(e) => panic!("get {}: {e}", meta.location),
                        }
                    }
                });
                let got: Vec<_> = futures::stream::iter(reads)
                    .buffer_unordered(8)
                    .collect()
                    .await;
                let mut seen = seen.lock().expect("lock");
                let mut out = BTreeMap::new();
                for (rel, etag, d) in got.into_iter().flatten() {
                    seen.insert(rel.clone(), (etag, d));
                    out.insert(rel, d);
                }
                out
            }),
        }
    }

    /// Multipart uploads started under this prefix and never completed or aborted.
    fn open_uploads(&self) -> usize {
        match self {
            Side::Local { .. } => 0,
            Side::S3 { bucket, prefix, .. } => {
                let (st, body) = s3_raw("GET", &format!("/{bucket}?uploads&prefix={prefix}"), "");
                if st == 200 {
                    body.matches("<Upload>").count()
                } else {
                    0
                }
            }
        }
    }
}

fn staging_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// What the source holds now, and every version it ever held.
#[derive(Default)]
struct Model {
    cur: BTreeMap<String, Digest>,
    history: BTreeMap<String, HashSet<Digest>>,
    next_key: usize,
    /// keys deleted since the last `begin_trial`
    deleted: BTreeSet<String>,
}

#[derive(Clone, Copy)]
enum Sizes {
    /// sync --once: mostly small, some up to 400 KB, rarely 12-15 MiB (3 chunks of 5 MiB)
    Once,
    /// the daemon: smaller, rarely 6-11 MiB
    Daemon,
}

fn pick_size(rng: &mut Rng, sizes: Sizes) -> usize {
    let r = rng.below(1000);
    match sizes {
        Sizes::Once if r < 10 => 12 * MIB + rng.below(3 * MIB as u64) as usize,
        Sizes::Daemon if r < 15 => 6 * MIB + rng.below(5 * MIB as u64) as usize,
        _ if r < 40 => 0,
        _ if r < 800 => rng.below(20_000) as usize,
        Sizes::Once => 20_000 + rng.below(400_000) as usize,
        Sizes::Daemon => 20_000 + rng.below(200_000) as usize,
    }
}

impl Model {
    fn new_key(&mut self, rng: &mut Rng) -> String {
        self.next_key += 1;
        let n = self.next_key;
        match rng.below(20) {
            0 => format!("with space/n {n}.bin"),
            1 => format!("odd+chars/ü-{n}%41.bin"),
            _ => format!("d{:02}/e{}/obj-{n:05}.bin", n % 11, n % 3),
        }
    }

    fn write(&mut self, side: &Side, key: &str, len: usize, rng: &mut Rng) {
        let data = bytes(rng.next(), len);
        let d = digest(&data);
        // in the history before it is anywhere: a reader may see it at once
        self.history.entry(key.to_string()).or_default().insert(d);
        side.put(key, data);
        self.cur.insert(key.to_string(), d);
    }

    fn remove(&mut self, side: &Side, key: &str) {
        side.delete(key);
        self.cur.remove(key);
        self.deleted.insert(key.to_string());
    }

    fn random_key(&self, rng: &mut Rng) -> Option<String> {
        if self.cur.is_empty() {
            return None;
        }
        let i = rng.below(self.cur.len() as u64) as usize;
        self.cur.keys().nth(i).cloned()
    }

    /// One random change: a create, an overwrite with a new size, or a delete.
    fn change(&mut self, side: &Side, rng: &mut Rng, sizes: Sizes) {
        let op = rng.below(10);
        let existing = self.random_key(rng);
        match (op, existing) {
            (0..=3, _) | (_, None) => {
                let k = self.new_key(rng);
                let len = pick_size(rng, sizes);
                self.write(side, &k, len, rng);
            }
            (4..=7, Some(k)) => {
                let old = self.cur[&k].0;
                let mut len = pick_size(rng, sizes);
                if len == old {
                    len += 1;
                }
                self.write(side, &k, len, rng);
            }
            (_, Some(k)) => self.remove(side, &k),
        }
    }

    /// Every visible destination object is a version the source held; returns how many of
    /// slate's temporary files were seen. Any other file fails.
    fn check_no_torn(&self, got: &BTreeMap<String, Digest>, ctx: &str) -> usize {
        let mut temps = 0;
        for (k, v) in got {
            if is_temp(k) {
                temps += 1;
                continue;
            }
            let known = self.history.get(k).is_some_and(|h| h.contains(v));
            assert!(
                known,
                "{ctx}: torn or foreign object at the destination: {k:?} ({} bytes; the source held {:?})",
                v.0,
                self.history.get(k).map(|h| h.iter().map(|d| d.0).collect::<Vec<_>>())
            );
        }
        temps
    }

    /// No key the source still has (and did not delete meanwhile) went missing.
    fn check_not_lost(&self, before: &BTreeSet<String>, got: &BTreeMap<String, Digest>, ctx: &str) {
        for k in before {
            if self.cur.contains_key(k) && !self.deleted.contains(k) {
                assert!(
                    got.contains_key(k),
                    "{ctx}: {k:?} was deleted at the destination, yet the source has it"
                );
            }
        }
    }

    /// The destination holds exactly the source (temporary files: see `temps_ok`).
    fn check_equal(
        &self,
        got: &BTreeMap<String, Digest>,
        temps_ok: &dyn Fn(&str) -> bool,
        ctx: &str,
    ) {
        let mut seen = 0;
        for (k, v) in got {
            if is_temp(k) {
                assert!(temps_ok(k), "{ctx}: temporary file left behind: {k}");
                continue;
            }
            let want = self.cur.get(k);
            assert!(
                want.is_some(),
                "{ctx}: {k:?} is at the destination, not at the source"
            );
            assert!(
                want == Some(v),
                "{ctx}: {k:?} differs: {} bytes, the source has {:?}",
                v.0,
                want.map(|d| d.0)
            );
            seen += 1;
        }
        if seen != self.cur.len() {
            let missing: Vec<_> = self
                .cur
                .keys()
                .filter(|k| !got.contains_key(*k))
                .take(10)
                .collect();
            panic!("{ctx}: missing at the destination: {missing:?}");
        }
    }
}

fn diff_code(db: &Path, src: &str, dst: &str) -> (Option<i32>, String) {
    let mut c = slate_db(db);
    c.args(["diff", src, dst]);
    let out = c.output().expect("diff");
    (
        out.status.code(),
        format!("{}{}", stdout(&out), stderr(&out)),
    )
}

// ---------------------------------------------------------------------------------------------
// sync --once

fn sync_once_trials(name: &'static str, src: Side, dst: Side, trials: usize) {
    let started = Instant::now();
    let mut repro = Repro { name, trial: 0 };
    let mut rng = Rng::for_test(name);
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let (su, du) = (src.url(), dst.url());
    let mut m = Model::default();

    // a few hundred objects of mixed sizes, three of them multi-chunk
    let n = 200 + rng.below(100) as usize;
    let mut initial = BTreeMap::new();
    for i in 0..n {
        let k = m.new_key(&mut rng);
        let len = if i < 3 {
            12 * MIB + rng.below(MIB as u64) as usize
        } else {
            pick_size(&mut rng, Sizes::Once)
        };
        let data = bytes(rng.next(), len);
        let d = digest(&data);
        m.history.entry(k.clone()).or_default().insert(d);
        m.cur.insert(k.clone(), d);
        initial.insert(k, data);
    }
    match &src {
        Side::Local { root, .. } => seed_local(root, &initial),
        Side::S3 {
            prefix, store, rt, ..
        } => rt.block_on(seed(store, prefix, &initial)),
    }
    drop(initial);

    let (mut mid_run, mut mid_copy, mut after_end, mut temps_seen) = (0, 0, 0, 0);
    let mut temps_left: Vec<String> = Vec::new();
    let both_local = matches!((&src, &dst), (Side::Local { .. }, Side::Local { .. }));
    // the range of kill delays, tuned as runs are seen to finish: the backfill is long, the
    // later runs (a few dozen changes each) short
    let (mut span, mut rerun_ms): (u64, u64) = (4000, 0);
    for trial in 0..trials {
        repro.trial = trial;
        let trial_start = Instant::now();
        let ctx = format!("{name} trial {trial}");
        // what the destination held: equal to the source after the previous trial
        let held: BTreeMap<String, Digest> = if trial == 0 {
            BTreeMap::new()
        } else {
            m.cur.clone()
        };
        let before: BTreeSet<String> = held.keys().cloned().collect();
        if trial > 0 {
            // a folder to a folder copies fast: more changes, so that a run lasts a while
            let n = if both_local {
                80 + rng.below(120)
            } else {
                10 + rng.below(50)
            };
            for _ in 0..n {
                m.change(&src, &mut rng, Sizes::Once);
            }
            if trial == 1 {
                // a run over a few dozen changes: about as long as the rerun after the backfill
                span = rerun_ms + 100;
            }
        }
        m.deleted.clear();
        let transfers = ["2", "4", "16"][rng.below(3) as usize];
        let mut c = slate_db(&db);
        c.args([
            "sync",
            "--once",
            &su,
            &du,
            "--chunk-size",
            "5MiB",
            "--streams",
            "3",
            "--transfers",
            transfers,
            "--quiet",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let mut child = Child(c.spawn().expect("spawn"));
        // every other trial into a local folder: kill 0-150 ms after the destination first
        // changes (the copy under way); else at a random moment, later ones likelier (the run
        // starts with a listing)
        let t0 = Instant::now();
        let (killed, how) = match (&dst, trial % 2) {
            (Side::Local { root, .. }, 1) => {
                let after = rng.below((span / 3).clamp(5, 150));
                let killed = kill_once_changed(&mut child, root, after, span * 3);
                (killed, format!("{after} ms after the first change"))
            }
            _ => {
                let delay = if trial == 0 {
                    rng.below(span) // the backfill: no idea yet how long a run takes
                } else {
                    // within the last run's length: most kills land mid-run on a fast,
                    // idle machine too
                    span / 8 + rng.below((span * 7 / 8).max(1))
                };
                (child.kill_after(delay), format!("at {delay} ms"))
            }
        };
        match killed {
            None => {
                mid_run += 1;
                span = span.max(t0.elapsed().as_millis() as u64) + span / 8;
            }
            Some(took) => {
                after_end += 1;
                span = (took * 4 / 5).max(50);
            }
        }
        let ctx = format!("{ctx} (killed {how}, --transfers {transfers})");
        let got = dst.read();
        let temps = m.check_no_torn(&got, &ctx);
        temps_seen += temps;
        m.check_not_lost(&before, &got, &ctx);
        let visible: BTreeMap<String, Digest> = got
            .iter()
            .filter(|(k, _)| !is_temp(k))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if killed.is_none() && (temps > 0 || visible != held) && visible != m.cur {
            // the kill caught it between its first and its last change at the destination
            mid_copy += 1;
        }

        // run again to the end: equal, and the killed run's temporary files are gone
        let mut c = slate_db(&db);
        c.args([
            "sync",
            "--once",
            &su,
            &du,
            "--chunk-size",
            "5MiB",
            "--quiet",
        ]);
        let t = Instant::now();
        let out = c.output().expect("run");
        rerun_ms = t.elapsed().as_millis() as u64;
        assert!(
            out.status.success(),
            "{ctx}: the rerun failed: {}",
            stderr(&out)
        );
        // the rerun alone (before `slate diff`, whose listing sweeps them too) must have
        // removed the killed run's temporary files; counted, reported and failed at the end, so
        // that every trial still runs
        let t = Instant::now();
        let after_rerun = dst.read();
        let left = after_rerun.keys().filter(|k| is_temp(k)).count();
        if left > 0 {
            temps_left.push(format!("trial {trial}: {left}"));
        }
        m.check_equal(&after_rerun, &|_| true, &ctx);
        let read_ms = t.elapsed().as_millis();
        let t = Instant::now();
        let (code, text) = diff_code(&db, &su, &du);
        let diff_ms = t.elapsed().as_millis();
        assert_eq!(code, Some(0), "{ctx}: diff after the rerun: {text}");
        if std::env::var_os("SLATE_CRASH_VERBOSE").is_some() {
            eprintln!(
                "{ctx}: {temps} temporary files after the kill, {left} after the rerun; trial {} ms; \
                 rerun {rerun_ms} ms, read {read_ms} ms, diff {diff_ms} ms",
                trial_start.elapsed().as_millis(),
            );
        }
    }
    let uploads = dst.open_uploads();
    eprintln!(
        "{name}: {trials} trials in {:.0} s, {mid_run} kills mid-run ({mid_copy} with the destination \
         half updated), {after_end} after the end; \
         {temps_seen} temporary files seen after kills, left by the rerun in {} trials; \
         {uploads} unfinished multipart uploads left at the destination",
        started.elapsed().as_secs_f64(),
        temps_left.len()
    );
    assert!(
        temps_left.is_empty(),
        "{name}: the rerun left the killed run's .slate-tmp-* files in place ({}): `sync --once` \
         sweeps orphaned temporary files only when it lists the destination, which it does not \
         once the manifest vouches for it",
        temps_left.join(", ")
    );
    // the trials mean something only if kills land mid-run; how many do depends on the
    // machine's speed, so the bar is a third (and two at least), not a majority
    assert!(
        mid_run * 3 >= trials && mid_run >= 2,
        "{name}: only {mid_run} of {trials} kills landed mid-run"
    );
}

#[test]
fn sync_once_killed_local_to_s3() {
    let rt = Arc::new(rt());
    let dir = tempfile::tempdir().expect("tmp");
    sync_once_trials(
        "sync_once_killed_local_to_s3",
        Side::local(dir.path(), "src"),
        Side::s3("slate-dst", "crash-dst", &rt),
        7,
    );
}

#[test]
fn sync_once_killed_s3_to_local() {
    let rt = Arc::new(rt());
    let dir = tempfile::tempdir().expect("tmp");
    sync_once_trials(
        "sync_once_killed_s3_to_local",
        Side::s3("slate-src", "crash-src", &rt),
        Side::local(dir.path(), "dst"),
        7,
    );
}

#[test]
fn sync_once_killed_local_to_local() {
    let dir = tempfile::tempdir().expect("tmp");
    sync_once_trials(
        "sync_once_killed_local_to_local",
        Side::local(dir.path(), "src"),
        Side::local(dir.path(), "dst"),
        10,
    );
}

// ---------------------------------------------------------------------------------------------
// the daemon

/// The daemon of a trial, started again and again over one database, each time with a log of
/// its own.
struct Restarts {
    db: PathBuf,
    logs: PathBuf,
    src: String,
    dst: String,
    events: Option<String>,
    starts: usize,
}

impl Restarts {
    fn log(&self, n: usize) -> PathBuf {
        self.logs.join(format!("daemon-{n}.log"))
    }

    /// Starts the daemon over the same database and waits until it follows changes.
    fn start(&mut self) -> Daemon {
        self.starts += 1;
        let mut extra = vec!["--chunk-size", "5MiB", "--streams", "3"];
        if let Some(e) = &self.events {
            extra.extend(["--events", e]);
        }
        Daemon::start(
            &self.db,
            &self.src,
            &self.dst,
            &extra,
            &self.log(self.starts),
        )
    }

    /// The ends of the last two daemons' logs.
    fn tail(&self) -> String {
        let mut out = String::new();
        for n in self.starts.saturating_sub(1)..=self.starts {
            let text = log_tail(&read_log(&self.log(n)));
            out.push_str(&format!("--- daemon-{n}.log (last lines)\n{text}\n"));
        }
        out
    }
}

/// The PID in a temporary file's name (`.slate-tmp-PID-RANDOM`).
fn temp_pid(key: &str) -> Option<u32> {
    key.rsplit('/')
        .next()?
        .strip_prefix(".slate-tmp-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

fn daemon_trials(name: &'static str, src: Side, dst: Side, events: Option<String>, trials: usize) {
    let started = Instant::now();
    let mut repro = Repro { name, trial: 0 };
    let mut rng = Rng::for_test(name);
    let dir = tempfile::tempdir().expect("tmp");
    let mut m = Model::default();
    for _ in 0..30 {
        m.change(&src, &mut rng, Sizes::Daemon);
    }
    let mut d = Restarts {
        db: dir.path().join("slate.db"),
        logs: dir.path().to_path_buf(),
        src: src.url(),
        dst: dst.url(),
        events,
        starts: 0,
    };
    let mut daemon = d.start();
    // equal: first by reading the destination (cheap), then as `slate diff` says (exit 0)
    let wait_equal = |d: &Restarts, daemon: &mut Daemon, m: &Model, ctx: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = dst.read();
            let same = got.len() >= m.cur.len()
                && m.cur.iter().all(|(k, v)| got.get(k) == Some(v))
                && got.keys().all(|k| is_temp(k) || m.cur.contains_key(k));
            let text = if same {
                let (code, text) = diff_code(&d.db, &d.src, &d.dst);
                if code == Some(0) {
                    return;
                }
                text
            } else {
                "(the destination differs from the source)".to_string()
            };
            if Instant::now() > deadline || !daemon.alive() {
                daemon.child.kill9();
                panic!("{ctx}: not equal in time: {text}\n{}", d.tail());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_equal(&d, &mut daemon, &m, &format!("{name} backfill"));

    let (mut temps_seen, mut changes) = (0, 0);
    for trial in 0..trials {
        repro.trial = trial;
        m.deleted.clear();
        let before: BTreeSet<String> = m.cur.keys().cloned().collect();
        // bursts of changes; the kill comes at a random moment among them
        let kill_at = Duration::from_millis(rng.below(1500));
        let t0 = Instant::now();
        while t0.elapsed() < kill_at {
            for _ in 0..1 + rng.below(8) {
                m.change(&src, &mut rng, Sizes::Daemon);
                changes += 1;
            }
            std::thread::sleep(Duration::from_millis(rng.below(150)));
        }
        daemon.child.kill9();
        let ctx = format!(
            "{name} trial {trial} (killed {} ms into the changes)",
            kill_at.as_millis()
        );
        let got = dst.read();
        temps_seen += m.check_no_torn(&got, &ctx);
        m.check_not_lost(&before, &got, &ctx);

        // changes while it is down: queued messages, or for a folder the restart's backfill
        for _ in 0..1 + rng.below(6) {
            m.change(&src, &mut rng, Sizes::Daemon);
            changes += 1;
        }
        let t = Instant::now();
        daemon = d.start();
        let start_ms = t.elapsed().as_millis();
        wait_equal(&d, &mut daemon, &m, &ctx);
        if std::env::var_os("SLATE_CRASH_VERBOSE").is_some() {
            eprintln!(
                "{ctx}: restart {start_ms} ms, then equal after {} ms",
                t.elapsed().as_millis() - start_ms
            );
        }
        let pid = daemon.child.id();
        // the killed daemon's temporary files: swept by the new one at its start (in the
        // background, so allow it a moment)
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = loop {
            let got = dst.read();
            let orphans = got.keys().any(|k| is_temp(k) && temp_pid(k) != Some(pid));
            if !orphans || Instant::now() > deadline {
                break got;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let ctx = format!("{ctx}\n{}", d.tail());
        // only the running daemon may have temporary files (a copy in flight)
        m.check_equal(&got, &|k| temp_pid(k) == Some(pid), &ctx);
    }
    // a clean stop at the end
    let code = daemon.stop();
    assert_eq!(code, Some(0), "SIGTERM: {}", d.tail());
    let got = dst.read();
    m.check_equal(&got, &|_| false, &format!("{name} after SIGTERM"));
    eprintln!(
        "{name}: {trials} trials in {:.0} s, {changes} source changes, {trials} kills (every one \
         mid-run), {temps_seen} temporary files seen after kills (all swept), {} objects at the end",
        started.elapsed().as_secs_f64(),
        m.cur.len()
    );
}

#[test]
fn daemon_killed_local_to_local() {
    let dir = tempfile::tempdir().expect("tmp");
    daemon_trials(
        "daemon_killed_local_to_local",
        Side::local(dir.path(), "src"),
        Side::local(dir.path(), "dst"),
        None,
        8,
    );
}

#[test]
fn daemon_killed_local_to_s3() {
    let rt = Arc::new(rt());
    let dir = tempfile::tempdir().expect("tmp");
    daemon_trials(
        "daemon_killed_local_to_s3",
        Side::local(dir.path(), "src"),
        Side::s3("slate-dst", "crash-dmn", &rt),
        None,
        7,
    );
}

#[test]
fn daemon_killed_s3_sqs_to_local() {
    let rt = Arc::new(rt());
    let (bucket, queue) = sqs_bucket("crash");
    let dir = tempfile::tempdir().expect("tmp");
    daemon_trials(
        "daemon_killed_s3_sqs_to_local",
        Side::s3(&bucket, "data", &rt),
        Side::local(dir.path(), "dst"),
        Some(format!("sqs://{queue}")),
        8,
    );
}

#[test]
fn the_next_sync_sweeps_the_temporary_files_a_killed_one_left() {
    // Deterministic: the file a SIGKILLed copy leaves (`.slate-tmp-PID-…` of a dead PID, full
    // size, as pre-allocated) under a pair that the manifest already vouches for.
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let (src, dst) = (Side::local(dir.path(), "src"), dir.path().join("dst"));
    let data: BTreeMap<String, Vec<u8>> = [("a/x.bin", 1000), ("b/y.bin", 2000)]
        .into_iter()
        .map(|(k, n)| (k.to_string(), bytes(n as u64, n)))
        .collect();
    let Side::Local { root, .. } = &src else {
        unreachable!()
    };
    seed_local(root, &data);
    let sync = || {
        let mut c = slate_db(&db);
        c.args(["sync", "--once", &src.url(), &dst.display().to_string()]);
        let out = c.output().expect("run");
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    sync();
    let mut child = std::process::Command::new("true").spawn().expect("true");
    let dead = child.id();
    child.wait().expect("wait");
    for (i, changed) in [true, false].into_iter().enumerate() {
        let orphan = dst.join(format!("a/.slate-tmp-{dead}-00000000000000a{i}"));
        std::fs::write(&orphan, vec![0u8; 1 << 20]).expect("plant");
        if changed {
            src.put("b/y.bin", bytes(9, 2500));
        }
        let report = sync();
        assert!(
            !orphan.exists(),
            "a `sync --once` {} left {} in place ({report})",
            if changed {
                "that copied a change"
            } else {
                "with nothing to do"
            },
            orphan.display()
        );
    }
}
