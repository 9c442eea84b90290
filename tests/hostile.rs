//! Hostile input (issue 6): every file of `tests/corpus/` through its parser, bodies too big
//! to commit made here, and every key they yield through the mapping to local paths and the
//! daemon's apply. What must hold:
//! - no parser panics;
//! - a rejected event gives one short line that names the culprit (`field.path: why`) and never
//!   echoes the input (corpus values carry the marker `SECRET`); a rejected config file gives
//!   one line naming the file (and the line, and the offending key: it is the user's own file);
//! - an accepted input yields well-formed results: keys not empty and without NUL, bucket
//!   names not empty and without `/` or NUL, batches flat and non-empty;
//! - no key, however hostile, makes slate write or delete outside a local destination root;
//! - a real payload the providers publish (`tests/corpus/published/`) means what its table
//!   says, the same through every wrapper a delivery path puts around it.
//!
//! Corpus file names say what is expected: `err-*` must be rejected, `ok-*` accepted, `any-*`
//! either; for the config, `invalid-*` parse but fail validation. GCS messages (`*.msg`) are
//! attribute lines (`name=value`), a blank line, then the data bytes, the same split the fuzz
//! target `gcs_event` makes; GCS `*.json` files are Pub/Sub push bodies. Event Grid `*.b64`
//! files are Storage Queue messages.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use slate::copy::transfer::Ctx;
use slate::copy::{CopyOptions, Counters, ProgressMode};
use slate::core::location::Location;
use slate::engine::key::Engine;
use slate::events::route::{Routed, Scope};
use slate::events::{self, ParseError, Parsed, MAX_BODY_BYTES};
use slate::state::inbox::{Inbox, Kind};
use slate::state::manifest::Manifest;
use slate::stores::local::safe_join;

// ---------------------------------------------------------------------------------------------
// The corpus
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Err,
    Ok,
    Any,
    /// Config only: parses, fails validation.
    Invalid,
}

fn expect_of(name: &str) -> Expect {
    match name.split('-').next() {
        Some("err") => Expect::Err,
        Some("ok") => Expect::Ok,
        Some("invalid") => Expect::Invalid,
        _ => Expect::Any,
    }
}

/// The files of `tests/corpus/{dir}`, sorted by name.
fn corpus(dir: &str) -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(dir);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| {
            let p = e.expect("a corpus entry").path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("a corpus file"))
        })
        .collect();
    out.sort();
    assert!(out.len() >= 10, "{}: too few corpus files", root.display());
    out
}

/// A GCS message from bytes: `name=value` lines, a blank line, the data (as the fuzz target).
fn split_gcs(input: &[u8]) -> (HashMap<String, String>, Vec<u8>) {
    let (head, data) = match input.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&input[..i], &input[i + 2..]),
        None => (input, &[][..]),
    };
    let attrs = String::from_utf8_lossy(head)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (attrs, data.to_vec())
}

/// The text a transport would hand a parser: SQS bodies and queue messages are strings, so
/// bytes that are not UTF-8 arrive replaced.
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Parses one corpus file with the parser of `dir`.
fn parse(dir: &str, name: &str, bytes: &[u8]) -> Result<Parsed, ParseError> {
    match dir {
        "s3" => events::parse_s3(&text(bytes)),
        "eventgrid" if name.ends_with(".b64") => {
            events::decode_queue_message(&text(bytes)).and_then(|j| events::parse_eventgrid(&j))
        }
        "eventgrid" => events::parse_eventgrid(&text(bytes)),
        "gcs" if name.ends_with(".json") => events::parse_gcs_push(&text(bytes)),
        "gcs" => {
            let (attrs, data) = split_gcs(bytes);
            events::parse_gcs(&attrs, &data)
        }
        other => panic!("no parser for {other}"),
    }
}

/// A rejection is one line of at most ~300 bytes, `culprit: why`, not echoing the input.
fn check_reason(reason: &str) -> Result<(), String> {
    if reason.contains(['\n', '\r']) || reason.len() > 310 {
        return Err(format!("not one short line: {reason:?}"));
    }
    if reason.contains("SECRET") {
        return Err(format!("echoes the input: {reason:?}"));
    }
    match reason.split_once(": ") {
        Some((culprit, why)) if !culprit.trim().is_empty() && culprit.len() <= 120 => {
            if why.trim().is_empty() {
                return Err(format!("says no reason: {reason:?}"));
            }
            Ok(())
        }
        _ => Err(format!("names no culprit: {reason:?}")),
    }
}

/// The project's rules for what a parser may return (see `events::Parsed`); the keys and
/// directory prefixes it names are collected in `keys`.
fn check_parsed(p: &Parsed, nested: bool, keys: &mut Vec<String>) -> Result<(), String> {
    let bucket_ok = |b: &str| !b.is_empty() && !b.contains(['/', '\0']);
    match p {
        Parsed::Events(evs) => {
            if evs.is_empty() {
                return Err("an empty Events".into());
            }
            for e in evs {
                if e.key.is_empty() || e.key.contains('\0') {
                    return Err(format!("a key the checks should refuse: {:?}", e.key));
                }
                if !bucket_ok(&e.bucket) {
                    return Err(format!(
                        "a bucket name the checks should refuse: {:?}",
                        e.bucket
                    ));
                }
                keys.push(e.key.clone());
            }
        }
        Parsed::PrefixReconcile { bucket, prefix } => {
            if !bucket_ok(bucket) || !prefix.ends_with('/') || prefix.contains('\0') {
                return Err(format!("a bad directory event: {bucket:?} {prefix:?}"));
            }
            keys.push(prefix.clone());
        }
        Parsed::Batch(items) => {
            let events = items
                .iter()
                .filter(|i| matches!(i, Parsed::Events(_)))
                .count();
            if nested || items.is_empty() || events > 1 {
                return Err(format!("a malformed batch: {p:?}"));
            }
            // invalid entries come last, beside at least one good one
            let good = items
                .iter()
                .take_while(|i| !matches!(i, Parsed::Invalid(_)))
                .count();
            if good == 0
                || items[good..]
                    .iter()
                    .any(|i| !matches!(i, Parsed::Invalid(_)))
            {
                return Err(format!("a malformed batch: {p:?}"));
            }
            for i in items {
                if matches!(i, Parsed::Ignore(_) | Parsed::Batch(_)) {
                    return Err(format!("a malformed batch: {p:?}"));
                }
                check_parsed(i, true, keys)?;
            }
        }
        Parsed::Invalid(why) => {
            if !nested {
                return Err(format!("an invalid event outside a batch: {p:?}"));
            }
            check_reason(why)?;
        }
        Parsed::Ignore(why) => {
            if why.is_empty() || nested {
                return Err(format!("a bad ignore: {p:?}"));
            }
        }
        Parsed::Handshake { validation_code } => {
            if validation_code.is_empty() {
                return Err("an empty handshake code".into());
            }
        }
    }
    Ok(())
}

/// Runs every file of one corpus folder; returns the keys the accepted ones named.
fn run_corpus(dir: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut keys = Vec::new();
    let (mut accepted, mut rejected) = (0, 0);
    for (name, bytes) in corpus(dir) {
        let got = match catch_unwind(AssertUnwindSafe(|| parse(dir, &name, &bytes))) {
            Ok(got) => got,
            Err(_) => {
                problems.push(format!("{name}: the parser panicked"));
                continue;
            }
        };
        let verdict = match (&got, expect_of(&name)) {
            (Err(e), Expect::Ok) => Err(format!("rejected: {e}")),
            (Ok(p), Expect::Err) => Err(format!("accepted: {p:?}")),
            (Err(e), _) => {
                rejected += 1;
                check_reason(&e.reason)
            }
            (Ok(p), _) => {
                accepted += 1;
                check_parsed(p, false, &mut keys)
            }
        };
        if let Err(why) = verdict {
            problems.push(format!("{name}: {why}"));
        }
    }
    assert!(
        problems.is_empty(),
        "{dir} corpus:\n  {}",
        problems.join("\n  ")
    );
    assert!(
        accepted > 0 && rejected > 0,
        "{dir}: {accepted} accepted, {rejected} rejected"
    );
    keys
}

/// Runs a parser's corpus and checks that these hostile keys were among those it parsed (so
/// the corpus really reaches the key checks downstream).
fn corpus_parses(dir: &str, hostile: &[&str]) {
    let keys = run_corpus(dir);
    for h in hostile {
        assert!(keys.iter().any(|k| k == h), "no {h:?} in {keys:?}");
    }
}

#[test]
fn s3_corpus() {
    corpus_parses(
        "s3",
        &[
            "../../etc/passwd",
            "/etc/passwd",
            "a/./../../b",
            "..",
            "photos/",
        ],
    );
}

#[test]
fn eventgrid_corpus() {
    corpus_parses(
        "eventgrid",
        &["../../etc/passwd", "/etc/passwd", "../../outside", "../"],
    );
}

#[test]
fn gcs_corpus() {
    corpus_parses(
        "gcs",
        &[
            "../../etc/passwd",
            "/etc/passwd",
            "cafe\u{301}",
            "caf\u{e9}",
        ],
    );
}

#[test]
fn config_corpus() {
    let mut problems = Vec::new();
    for (name, bytes) in corpus("config") {
        let origin = format!("corpus/{name}");
        let got = catch_unwind(AssertUnwindSafe(|| {
            slate::config::Config::parse(&text(&bytes), &origin)
                .and_then(|c| c.validate(&origin).map(|()| c))
        }));
        let verdict = match (got, expect_of(&name)) {
            (Err(_), _) => Err("panicked".to_string()),
            (Ok(Ok(_)), Expect::Err | Expect::Invalid) => Err("accepted".to_string()),
            (Ok(Err(e)), Expect::Ok) => Err(format!("rejected: {e}")),
            (Ok(Ok(_)), _) => Ok(()),
            (Ok(Err(e)), want) => {
                let shown = e.to_string();
                let parsed = slate::config::Config::parse(&text(&bytes), &origin).is_ok();
                if shown.chars().any(char::is_control) || !shown.contains(&origin) {
                    Err(format!("not one line naming the file: {shown:?}"))
                } else if want == Expect::Invalid && !parsed {
                    Err(format!("should parse and fail validation: {shown}"))
                } else if want == Expect::Err && parsed {
                    Err(format!("should not parse: {shown}"))
                } else {
                    Ok(())
                }
            }
        };
        if let Err(why) = verdict {
            problems.push(format!("{name}: {why}"));
        }
    }
    assert!(
        problems.is_empty(),
        "config corpus:\n  {}",
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// Inputs too big to commit
// ---------------------------------------------------------------------------------------------

fn s3_body(key: &str) -> String {
    serde_json::json!({"Records": [{"eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": "b"}, "object": {"key": key, "size": 1}}}]})
    .to_string()
}

fn eg_body(key: &str) -> String {
    serde_json::json!([{"eventType": "Microsoft.Storage.BlobCreated", "id": "i",
        "subject": format!("/blobServices/default/containers/c/blobs/{key}"),
        "data": {"contentLength": 1}}])
    .to_string()
}

fn gcs_attrs(key: &str) -> HashMap<String, String> {
    [
        ("eventType", "OBJECT_FINALIZE"),
        ("bucketId", "b"),
        ("objectId", key),
        ("payloadFormat", "NONE"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Every generated body through every parser: `want_err` says whether it must be rejected.
fn generated() -> Vec<(String, Result<Parsed, ParseError>, bool)> {
    let mut out = Vec::new();
    let over = MAX_BODY_BYTES + 1;
    for (what, depth) in [("arrays", 10_000), ("arrays", 120_000), ("objects", 40_000)] {
        let bomb = if what == "arrays" {
            format!("{}{}", "[".repeat(depth), "]".repeat(depth))
        } else {
            format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
        };
        let label = format!("{what} nested {depth} deep");
        let records = format!(r#"{{"Records":{bomb}}}"#);
        let sns = serde_json::json!({"Type": "Notification", "Message": records}).to_string();
        out.push((format!("s3: {label}"), events::parse_s3(&records), true));
        out.push((format!("s3 in SNS: {label}"), events::parse_s3(&sns), true));
        out.push((
            format!("eventgrid: {label}"),
            events::parse_eventgrid(&bomb),
            true,
        ));
        let gcs = events::parse_gcs(&gcs_attrs("k"), bomb.as_bytes());
        // with payload NONE the data is not read
        out.push((format!("gcs data (payload NONE): {label}"), gcs, false));
        let mut attrs = gcs_attrs("k");
        attrs.insert("payloadFormat".into(), "JSON_API_V1".into());
        let gcs = events::parse_gcs(&attrs, bomb.as_bytes());
        out.push((format!("gcs data: {label}"), gcs, true));
    }
    // oversized: one byte over the limit, however well-formed
    let pad = "x".repeat(over);
    let big = format!(r#"{{"Records":[],"pad":"{pad}"}}"#);
    out.push(("s3: oversized".into(), events::parse_s3(&big), true));
    out.push((
        "eventgrid: oversized".into(),
        events::parse_eventgrid(&format!("[{big}]")),
        true,
    ));
    out.push((
        "eventgrid queue: oversized".into(),
        events::decode_queue_message(&pad).map(|_| Parsed::Ignore("decoded")),
        true,
    ));
    out.push((
        "gcs: oversized data".into(),
        events::parse_gcs(&gcs_attrs("k"), pad.as_bytes()),
        true,
    ));
    let mut attrs = gcs_attrs("k");
    attrs.insert("huge".into(), pad.clone());
    out.push((
        "gcs: oversized attributes".into(),
        events::parse_gcs(&attrs, b""),
        true,
    ));
    out.push((
        "gcs push: oversized".into(),
        events::parse_gcs_push(&format!(r#"{{"message":{{"pad":"{pad}"}}}}"#)),
        true,
    ));
    // huge keys that fit: accepted by the parsers, refused by the local mapping below
    let long = "k".repeat(200 * 1024);
    out.push((
        "s3: 200 KiB key".into(),
        events::parse_s3(&s3_body(&long)),
        false,
    ));
    out.push((
        "eventgrid: 200 KiB key".into(),
        events::parse_eventgrid(&eg_body(&long)),
        false,
    ));
    out.push((
        "gcs: 200 KiB key".into(),
        events::parse_gcs(&gcs_attrs(&long), b""),
        false,
    ));
    // many small records under the limit
    let record =
        r#"{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}"#;
    let n = MAX_BODY_BYTES / (record.len() + 1) - 1;
    let many = format!(r#"{{"Records":[{}]}}"#, vec![record; n].join(","));
    out.push((format!("s3: {n} records"), events::parse_s3(&many), false));
    let huge_number =
        s3_body("k").replace(r#""size":1"#, &format!(r#""size":1{}"#, "0".repeat(5000)));
    out.push((
        "s3: a 5,000-digit size".into(),
        events::parse_s3(&huge_number),
        true,
    ));
    out
}

#[test]
fn generated_hostile_bodies() {
    let mut problems = Vec::new();
    for (name, got, want_err) in generated() {
        match got {
            Ok(_) if want_err => problems.push(format!("{name}: accepted")),
            Ok(p) => {
                let mut keys = Vec::new();
                if let Err(why) = check_parsed(&p, false, &mut keys) {
                    problems.push(format!("{name}: {why}"));
                }
            }
            Err(e) => {
                if !want_err {
                    problems.push(format!("{name}: rejected: {e}"));
                } else if let Err(why) = check_reason(&e.reason) {
                    problems.push(format!("{name}: {why}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn config_depth_bombs_and_huge_files() {
    let bombs = [
        format!("x = {}{}", "[".repeat(100_000), "]".repeat(100_000)),
        format!("x = {}1{}", "{a=".repeat(100_000), "}".repeat(100_000)),
        format!("{}a = 1", "a.".repeat(100_000)),
        format!("[{}a]", "a.".repeat(100_000)),
        format!("[copy]\ntransfers = 1{}", "0".repeat(100_000)),
        format!("[daemon]\ndb = \"{}\"", "d".repeat(4 << 20)),
    ];
    for (i, text) in bombs.iter().enumerate() {
        match slate::config::Config::parse(text, "bomb.toml") {
            Ok(_) => assert_eq!(i, 5, "bomb {i} accepted"),
            Err(e) => {
                let shown = e.to_string();
                assert!(
                    !shown.contains('\n') && shown.contains("bomb.toml"),
                    "{shown}"
                );
                assert!(
                    shown.len() < 1_000,
                    "bomb {i}: a {} byte error",
                    shown.len()
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Keys never leave a local destination root
// ---------------------------------------------------------------------------------------------

/// Keys made here: the classics, and lengths around the limits of file systems.
fn generated_keys() -> Vec<String> {
    let mut keys: Vec<String> = [
        "",
        ".",
        "..",
        "../",
        "./a",
        "a/.",
        "a/..",
        "a/../b",
        "../../../../etc/passwd",
        "/",
        "/etc/passwd",
        "//x",
        "a//b",
        "a/",
        "a\0b",
        "\0",
        "..\\..\\x",
        "a/.../b",
        "...",
        "~",
        "~/x",
        "$HOME",
        "%2e%2e%2f",
        "\u{2024}\u{2024}/x",
        "\u{ff0e}\u{ff0e}/x",
        "caf\u{e9}",
        "cafe\u{301}",
        "a\nb",
        "\u{202e}txt.exe",
        ".slate-tmp-1-x",
        "dir/.slate-tmp-2-y",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    keys.push("s".repeat(255));
    keys.push("s".repeat(256));
    keys.push("k".repeat(1024));
    keys.push("a/".repeat(512) + "z");
    keys.push("b/".repeat(2100) + "z");
    keys.push("c".repeat(200 * 1024));
    keys
}

/// `safe_join` refuses `key`, or maps it to a path strictly under `root` with one plain
/// component per segment of the key.
fn check_join(root: &Path, key: &str) -> Result<Option<PathBuf>, String> {
    match safe_join(root, key) {
        Err(e) => {
            let shown = e.to_string();
            if shown.contains('\n') && !key.contains('\n') {
                return Err(format!("{key:?}: a multi-line error: {shown}"));
            }
            Ok(None)
        }
        Ok(path) => {
            let rel = path
                .strip_prefix(root)
                .map_err(|_| format!("{key:?} maps outside the root: {}", path.display()))?;
            let parts: Vec<_> = rel.components().collect();
            if parts.is_empty() || !parts.iter().all(|c| matches!(c, Component::Normal(_))) {
                return Err(format!("{key:?} maps to {}", path.display()));
            }
            if parts.len() != key.split('/').count() {
                return Err(format!(
                    "{key:?}: segments lost or added: {}",
                    path.display()
                ));
            }
            Ok(Some(path))
        }
    }
}

/// Every key the corpus and the generated bodies name, and the generated keys.
fn all_hostile_keys() -> BTreeSet<String> {
    let mut keys: BTreeSet<String> = generated_keys().into_iter().collect();
    for dir in ["s3", "eventgrid", "gcs"] {
        keys.extend(run_corpus(dir));
    }
    for (_, got, _) in generated() {
        if let Ok(p) = got {
            let mut k = Vec::new();
            let _ = check_parsed(&p, false, &mut k);
            keys.extend(k);
        }
    }
    keys
}

#[test]
fn no_key_maps_outside_a_local_destination() {
    let root = Path::new("/srv/replica/data");
    let mut problems = Vec::new();
    let (mut refused, mut mapped) = (0, 0);
    let mut twins = HashMap::new();
    for key in all_hostile_keys() {
        match check_join(root, &key) {
            Err(why) => problems.push(why),
            Ok(None) => refused += 1,
            Ok(Some(path)) => {
                mapped += 1;
                if let Some(other) = twins.insert(path.clone(), key.clone()) {
                    problems.push(format!("{other:?} and {key:?} map to one path"));
                }
            }
        }
        // keys are data for cloud destinations, but `.`/`..` segments are not addressable
        if key.split('/').any(|s| s == "." || s == "..") {
            assert!(slate::stores::side::store_path(&key).is_err(), "{key:?}");
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        refused >= 20 && mapped >= 10,
        "{refused} refused, {mapped} mapped"
    );
    // the two spellings of "café" are two keys, two files
    assert!(safe_join(root, "caf\u{e9}").unwrap() != safe_join(root, "cafe\u{301}").unwrap());
}

/// The real pieces of the daemon for a local source and destination, in this process (no
/// `slate` is spawned).
struct InProcessDaemon {
    manifest: Arc<Manifest>,
    pair: i64,
    engine: Engine,
}

impl InProcessDaemon {
    async fn new(src: &Path, dst: &Path, db: &Path) -> InProcessDaemon {
        let loc = |p: &Path| Location::parse(&format!("{}/", p.display())).expect("a location");
        let (src_loc, dst_loc) = (loc(src), loc(dst));
        let manifest = Arc::new(Manifest::open(db).expect("the manifest"));
        let pair = manifest
            .pair(&src_loc.to_string(), &dst_loc.to_string())
            .expect("a pair")
            .id;
        let plan = slate::copy::plan(&src_loc, &dst_loc).await.expect("a plan");
        let opts = CopyOptions {
            progress: ProgressMode::Quiet,
            ..CopyOptions::default()
        };
        let ctx = Arc::new(Ctx::new(&plan, opts, Arc::new(Counters::default())).expect("ctx"));
        let engine = Engine::new(manifest.clone(), pair, ctx, dst_loc);
        InProcessDaemon {
            manifest,
            pair,
            engine,
        }
    }

    /// Stores `keys` in the inbox as events, then applies every pending key as the daemon
    /// does; returns each key's outcome (`Ok` or the error's text).
    async fn apply_all(&self, keys: &[(String, Kind)]) -> BTreeMap<String, Result<(), String>> {
        let inbox = Inbox::new(&self.manifest);
        let rows: Vec<_> = keys
            .iter()
            .map(|(k, kind)| (k.clone(), *kind, None))
            .collect();
        inbox.push(self.pair, &rows).expect("push");
        let mut out = BTreeMap::new();
        for p in inbox.take(self.pair, usize::MAX >> 1).expect("take") {
            let r = self
                .engine
                .reconcile_with_token(&p.key, p.token.as_deref())
                .await;
            inbox.done(self.pair, &p.key, p.events).expect("done");
            out.insert(p.key, r.map(|_| ()).map_err(|e| e.to_string()));
        }
        out
    }
}

/// Every file and folder under `root` (relative path → content, `None` for folders).
fn tree(root: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read_dir") {
            let p = e.expect("an entry").path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let meta = std::fs::symlink_metadata(&p).expect("metadata");
            if meta.is_dir() {
                out.insert(rel, None);
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read(&p).ok());
            }
        }
    }
    out
}

/// A source folder beside bait files, a destination folder beside victim files; every hostile
/// key goes through the inbox and the daemon's apply. Nothing outside the destination may
/// change; the well-formed control key is copied.
#[test]
fn hostile_keys_through_the_daemon_write_nothing_outside_the_destination() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (src, dst) = (t.join("s/src"), t.join("d/dst"));
    for d in [&src, &dst, &t.join("d/keep")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(t.join("s/bait.txt"), "bait").unwrap();
    std::fs::write(t.join("d/victim.txt"), "victim").unwrap();
    std::fs::write(t.join("d/keep/victim.txt"), "victim").unwrap();
    std::fs::write(src.join("control.txt"), "control").unwrap();
    std::fs::create_dir_all(src.join("photos")).unwrap();

    let mut keys: Vec<(String, Kind)> = Vec::new();
    for k in all_hostile_keys() {
        keys.push((k.clone(), Kind::Upsert));
        keys.push((k, Kind::Delete)); // coalesces with the upsert: one row
    }
    // escapes that would find something: a source file beside the source folder (copy path),
    // a destination-side file with no source (delete path), absolute paths to both
    for k in [
        "../bait.txt".to_string(),
        "../victim.txt".to_string(),
        "../keep/victim.txt".to_string(),
        "control.txt/../../victim.txt".to_string(),
        t.join("s/bait.txt").display().to_string(),
        t.join("d/victim.txt").display().to_string(),
        "control.txt".to_string(),
    ] {
        keys.push((k, Kind::Upsert));
    }
    let before = tree(t);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcomes = rt.block_on(async {
        let d = InProcessDaemon::new(&src, &dst, &db.path().join("slate.db")).await;
        d.apply_all(&keys).await
    });

    let after = tree(t);
    let mut problems = Vec::new();
    for (path, was) in &before {
        if after.get(path) != Some(was) {
            problems.push(format!("{} changed", path.display()));
        }
    }
    for (path, content) in &after {
        let inside = path.starts_with("d/dst");
        if !before.contains_key(path) && !inside {
            problems.push(format!(
                "{} appeared outside the destination",
                path.display()
            ));
        }
        if inside && content.is_some() && path != Path::new("d/dst/control.txt") {
            problems.push(format!("{} written in the destination", path.display()));
        }
    }
    assert_eq!(outcomes.get("control.txt"), Some(&Ok(())), "{outcomes:?}");
    assert_eq!(
        std::fs::read(dst.join("control.txt")).ok().as_deref(),
        Some(&b"control"[..])
    );
    for (key, outcome) in &outcomes {
        let unsafe_key = safe_join(&dst, key).is_err();
        if unsafe_key && outcome.is_ok() {
            problems.push(format!("{key:?}: applied although no safe path exists"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(outcomes.len() > 50, "only {} keys applied", outcomes.len());
}

/// A folder of the destination that is a symlink to elsewhere: slate refuses to write through
/// it (`DirMaker::ensure_parent`). A delete must refuse too.
#[test]
fn a_symlinked_folder_in_the_destination_is_not_written_through() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (src, dst, elsewhere) = (t.join("src"), t.join("dst"), t.join("elsewhere"));
    for d in [&src.join("link"), &dst, &elsewhere] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::os::unix::fs::symlink(&elsewhere, dst.join("link")).unwrap();
    std::fs::write(src.join("link/new.txt"), "new").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcomes = rt.block_on(async {
        let d = InProcessDaemon::new(&src, &dst, &db.path().join("slate.db")).await;
        d.apply_all(&[("link/new.txt".into(), Kind::Upsert)]).await
    });
    assert!(outcomes["link/new.txt"].is_err(), "{outcomes:?}");
    assert!(
        !elsewhere.join("new.txt").exists(),
        "written through a symlink"
    );
}

/// The delete side of the test above: the source no longer has `link/victim.txt`, the
/// destination's `link` is a symlink to a folder elsewhere that has a `victim.txt`. Expected:
/// the apply fails (or leaves it), and `elsewhere/victim.txt` survives. (Found by this suite:
/// deletes went through `safe_join` alone, without the symlink check writes get; both delete
/// paths now use `copy::local::remove_below`.)
#[test]
fn a_symlinked_folder_in_the_destination_is_not_deleted_through() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (src, dst, elsewhere) = (t.join("src"), t.join("dst"), t.join("elsewhere"));
    for d in [&src, &dst, &elsewhere] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::os::unix::fs::symlink(&elsewhere, dst.join("link")).unwrap();
    std::fs::write(elsewhere.join("victim.txt"), "victim").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcomes = rt.block_on(async {
        let d = InProcessDaemon::new(&src, &dst, &db.path().join("slate.db")).await;
        d.apply_all(&[("link/victim.txt".into(), Kind::Delete)])
            .await
    });
    assert!(
        elsewhere.join("victim.txt").exists(),
        "deleted through a symlink: {outcomes:?}"
    );
}

/// Directory events name prefixes that the router lists at the source; a hostile one must
/// stay inside the pair (relative, or refused) and be unaddressable in a cloud store when it
/// holds `..`.
#[test]
fn hostile_directory_events_stay_inside_the_pair() {
    let scope = Scope {
        bucket: "c".into(),
        prefix: "data".into(),
    };
    for (name, bytes) in corpus("eventgrid") {
        let Ok(parsed) = parse("eventgrid", &name, &bytes) else {
            continue;
        };
        let mut routed = Routed::default();
        routed.add(parsed, &scope, "az");
        for p in &routed.prefixes {
            let listed = scope.prefix.clone() + "/" + p.trim_end_matches('/');
            if p.split('/').any(|s| s == "..") {
                assert!(
                    slate::stores::side::store_path(&listed).is_err(),
                    "{name}: {listed:?} can be listed"
                );
            }
        }
        for (key, _, _, _) in &routed.rows {
            assert!(!key.is_empty() && !key.contains('\0'), "{name}: {key:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Published payloads: real examples from the providers' docs and SDK fixtures
// (tests/corpus/published/SOURCES.md), each replayed through every wrapper a delivery path
// puts around it; a payload must mean the same thing whichever way it came.
// ---------------------------------------------------------------------------------------------

/// The files of `tests/corpus/published/{dir}`, sorted by name.
fn published(dir: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/published")
        .join(dir);
    let mut out: Vec<(String, String)> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| {
            let p = e.expect("a corpus entry").path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).expect("a published payload is UTF-8");
            (name, text)
        })
        .collect();
    out.sort();
    out
}

/// What a parse came to, in one line: the verdict a table can state.
fn summary(got: &Result<Parsed, ParseError>) -> String {
    fn one(p: &Parsed) -> String {
        match p {
            Parsed::Events(evs) => evs
                .iter()
                .map(|e| format!("{:?} {}/{}", e.kind, e.bucket, e.key))
                .collect::<Vec<_>>()
                .join(", "),
            Parsed::Ignore(why) => format!("ignore {why}"),
            Parsed::Handshake { validation_code } => format!("handshake {validation_code}"),
            Parsed::PrefixReconcile { bucket, prefix } => format!("reconcile {bucket}/{prefix}"),
            Parsed::Batch(items) => items.iter().map(one).collect::<Vec<_>>().join("; "),
            Parsed::Invalid(why) => format!("invalid {why}"),
        }
    }
    match got {
        Ok(p) => one(p),
        Err(e) => format!("error {}", e.reason),
    }
}

/// SNS's envelope around a message (S3 → SNS → SQS without raw delivery; EventBridge → SNS).
fn sns_wrap(body: &str) -> String {
    serde_json::json!({
        "Type": "Notification",
        "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
        "TopicArn": "arn:aws:sns:us-west-2:123456789012:MyTopic",
        "Subject": "Amazon S3 Notification",
        "Message": body,
        "Timestamp": "2012-05-02T00:54:06.655Z",
        "SignatureVersion": "1",
        "Signature": "EXAMPLE",
        "SigningCertURL": "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem",
        "UnsubscribeURL": "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe"
    })
    .to_string()
}

/// A Pub/Sub push request around a message, as Pub/Sub sends it.
fn push_wrap(attributes: &BTreeMap<String, String>, data: &[u8]) -> String {
    use base64::Engine as _;
    serde_json::json!({
        "message": {
            "attributes": attributes,
            "data": base64::engine::general_purpose::STANDARD.encode(data),
            "messageId": "2070443601311540",
            "message_id": "2070443601311540",
            "publishTime": "2021-02-26T19:13:55.749Z",
            "publish_time": "2021-02-26T19:13:55.749Z"
        },
        "subscription": "projects/myproject/subscriptions/mysubscription"
    })
    .to_string()
}

/// Checks one replay against what its payload must come to; returns the number of replays.
fn replay(
    problems: &mut Vec<String>,
    what: &str,
    got: Result<Parsed, ParseError>,
    want: &str,
) -> usize {
    let said = summary(&got);
    let shape = match &got {
        Ok(p) => check_parsed(p, false, &mut Vec::new()),
        Err(e) => check_reason(&e.reason),
    };
    // an error's culprit path moves with the wrapper (`Message: …`): errors match on "error"
    let same = match want.strip_prefix("error") {
        Some(_) => said.starts_with("error"),
        None => said == want,
    };
    if !same {
        problems.push(format!("{what}: came to {said:?}, not {want:?}"));
    }
    if let Err(why) = shape {
        problems.push(format!("{what}: {why}"));
    }
    1
}

/// S3 notifications as AWS publishes them, each as the SQS body and inside SNS's envelope.
#[test]
fn published_s3_payloads_mean_the_same_on_every_path() {
    const CREATED: &str = "Upsert";
    let want: &[(&str, String)] = &[
        (
            "aws-docs-eventbridge-object-created.json",
            format!("{CREATED} DOC-EXAMPLE-BUCKET1/example-key"),
        ),
        (
            "aws-docs-eventbridge-object-deleted-lifecycle.json",
            "Delete DOC-EXAMPLE-BUCKET1/example-key".into(),
        ),
        (
            "aws-docs-eventbridge-object-deleted.json",
            "Delete DOC-EXAMPLE-BUCKET1/example-key".into(),
        ),
        (
            "aws-docs-eventbridge-object-restore-completed.json",
            "ignore eventbridge: not an object create, delete or tag change".into(),
        ),
        (
            "aws-docs-s3-object-created-put.json",
            "Upsert mybucket/HappyFace.jpg".into(),
        ),
        ("aws-docs-s3-test-event.json", "ignore s3:TestEvent".into()),
        // "Happy%20Face.jpg" form-decoded; its sequencer "Happy Sequencer" dropped, the event kept
        (
            "aws-lambda-go-s3-event-with-decoded.json",
            "Upsert sourcebucket/Happy Face.jpg".into(),
        ),
        (
            "aws-lambda-go-s3-event.json",
            "Upsert sourcebucket/Happy Face.jpg".into(),
        ),
        // restore, tiering, lifecycle transition, failed replication: the bytes did not change
        (
            "aws-lambda-go-s3-glacier-event.json",
            "ignore s3: no create or delete records".into(),
        ),
        (
            "aws-lambda-go-s3-intelligenttier-event.json",
            "ignore s3: no create or delete records".into(),
        ),
        (
            "aws-lambda-go-s3-lifecycle-event.json",
            "ignore s3: no create or delete records".into(),
        ),
        (
            "aws-lambda-go-s3-replication-event.json",
            "ignore s3: no create or delete records".into(),
        ),
        (
            "aws-lambda-go-s3-restore-event.json",
            "ignore s3: no create or delete records".into(),
        ),
        // kept as a dead letter to confirm by hand (and a WARN line naming the topic)
        (
            "aws-sns-docs-subscription-confirmation.json",
            "error".into(),
        ),
        (
            "aws-sns-docs-unsubscribe-confirmation.json",
            "ignore sns:UnsubscribeConfirmation".into(),
        ),
        (
            "powertools-s3Event.json",
            "Upsert lambda-artifacts-deafc19498e3f2df/b21b84d653bb07b05b1e6b33684dc11b".into(),
        ),
        (
            "powertools-s3EventBridgeNotificationObjectCreatedEvent.json",
            "Upsert example-bucket/IMG_m7fzo3.jpg".into(),
        ),
        (
            "powertools-s3EventBridgeNotificationObjectDeletedEvent.json",
            "Delete example-bucket/IMG_m7fzo3.jpg".into(),
        ),
        (
            "powertools-s3EventBridgeNotificationObjectExpiredEvent.json",
            "Delete example-bucket/IMG_m7fzo3.jpg".into(),
        ),
        (
            "powertools-s3EventBridgeNotificationObjectRestoreCompletedEvent.json",
            "ignore eventbridge: not an object create, delete or tag change".into(),
        ),
        (
            "powertools-s3EventDecodedKey.json",
            "Upsert sourcebucket/Happy Face.jpg".into(),
        ),
        (
            "powertools-s3EventDeleteObject.json",
            "Delete lambda-artifacts-deafc19498e3f2df/b21b84d653bb07b05b1e6b33684dc11b".into(),
        ),
        (
            "powertools-s3EventGlacier.json",
            "Upsert lambda-artifacts-deafc19498e3f2df/b21b84d653bb07b05b1e6b33684dc11b".into(),
        ),
        (
            "powertools-s3SqsEvent-body0.sqs",
            "Upsert xxx/test.pdf".into(),
        ),
        // SNS notifications of something else on the queue: dead letters, not guesses
        ("powertools-snsSqsEvent-body0.sqs", "error".into()),
        ("powertools-snsSqsFifoEvent-body0.sqs", "error".into()),
    ];
    let files = published("s3");
    assert_eq!(
        files.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        want.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        "every published S3 payload has a verdict in the table"
    );
    let (mut problems, mut replays) = (Vec::new(), 0);
    for ((name, body), (_, want)) in files.iter().zip(want) {
        replays += replay(
            &mut problems,
            &format!("{name} (SQS body)"),
            events::parse_s3(body),
            want,
        );
        // an SNS message of its own (a confirmation, a notification) is not wrapped again
        let sns = serde_json::from_str::<serde_json::Value>(body)
            .map(|v| v.get("Type").is_some())
            .unwrap_or(false);
        if !sns {
            let wrapped = sns_wrap(body);
            replays += replay(
                &mut problems,
                &format!("{name} (in SNS)"),
                events::parse_s3(&wrapped),
                want,
            );
        }
    }
    assert!(
        problems.is_empty(),
        "published S3 payloads:\n  {}",
        problems.join("\n  ")
    );
    eprintln!("{} published S3 payloads, {replays} replays", files.len());
}

/// Azure Blob events as Microsoft's docs show them (Event Grid schema and CloudEvents), each
/// as a webhook delivery and as the Storage Queue messages Event Grid writes (one event per
/// message, base64).
#[test]
fn published_eventgrid_payloads_mean_the_same_on_every_path() {
    let fs = "my-file-system";
    let mut want: Vec<(String, String)> = Vec::new();
    for schema in ["cloudevents", "eventgrid-schema"] {
        let mut add = |name: &str, verdict: String| {
            want.push((format!("azure-docs-{schema}-{name}.json"), verdict))
        };
        add("adls-blob-created", format!("Upsert {fs}/new-file.txt"));
        add(
            "adls-blob-deleted",
            format!("Delete {fs}/file-to-delete.txt"),
        );
        add(
            "adls-blob-renamed",
            format!("Delete {fs}/my-original-file.txt, Upsert {fs}/my-renamed-file.txt"),
        );
        // an empty folder holds no object to copy
        add(
            "adls-directory-created",
            "ignore eventgrid: event type not handled".into(),
        );
        add(
            "adls-directory-deleted",
            format!("reconcile {fs}/directory-to-delete/"),
        );
        add(
            "adls-directory-renamed",
            format!("reconcile {fs}/my-original-directory/; reconcile {fs}/my-renamed-directory/"),
        );
        // a tier change and a rehydration started leave the bytes as they are
        add(
            "async-operation-initiated",
            "ignore eventgrid: event type not handled".into(),
        );
        add("blob-created", "Upsert test-container/new-file.txt".into());
        add(
            "blob-deleted",
            "Delete testcontainer/file-to-delete.txt".into(),
        );
        add(
            "blob-tier-changed",
            "ignore eventgrid: event type not handled".into(),
        );
        if schema == "cloudevents" {
            add(
                "sftp-blob-created",
                "Upsert testcontainer/new-file.txt".into(),
            );
            add(
                "sftp-blob-deleted",
                "Delete testcontainer/new-file.txt".into(),
            );
        } else {
            add(
                "subscription-validation",
                "handshake 512d38b6-c7b8-40c8-89fe-f46f9e9622b6".into(),
            );
        }
    }
    want.sort();
    let files = published("eventgrid");
    assert_eq!(
        files.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        want.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        "every published Event Grid payload has a verdict in the table"
    );
    let (mut problems, mut replays) = (Vec::new(), 0);
    for ((name, body), (_, want)) in files.iter().zip(&want) {
        replays += replay(
            &mut problems,
            &format!("{name} (webhook)"),
            events::parse_eventgrid(body),
            want,
        );
        if want.starts_with("handshake") {
            continue; // a webhook's handshake; a queue subscription has none
        }
        let v: serde_json::Value = serde_json::from_str(body).expect("published JSON");
        let each = match v {
            serde_json::Value::Array(items) => items,
            one => vec![one],
        };
        for (i, ev) in each.iter().enumerate() {
            use base64::Engine as _;
            let msg = base64::engine::general_purpose::STANDARD.encode(ev.to_string());
            let got = events::decode_queue_message(&msg).and_then(|j| events::parse_eventgrid(&j));
            replays += replay(
                &mut problems,
                &format!("{name} (queue message {i})"),
                got,
                want,
            );
        }
    }
    assert!(
        problems.is_empty(),
        "published Event Grid payloads:\n  {}",
        problems.join("\n  ")
    );
    eprintln!(
        "{} published Event Grid payloads, {replays} replays",
        files.len()
    );
}

/// Cloud Storage object resources as Google publishes them (the `JSON_API_V1` payload of a
/// notification), sent with the attributes GCS documents for each event type, pulled and
/// pushed; and Pub/Sub push requests that carry no storage notification.
#[test]
fn published_gcs_payloads_mean_the_same_on_every_path() {
    let files = published("gcs");
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "google-cloudevents-MessagePublishedData-binary.push.json",
            "google-cloudevents-MessagePublishedData-duplicatedFields.push.json",
            "google-cloudevents-MessagePublishedData-text.push.json",
            "google-cloudevents-StorageObjectData-complex.json",
            "google-cloudevents-StorageObjectData-simple.json",
        ]
    );
    let (mut problems, mut replays) = (Vec::new(), 0);
    for (name, body) in &files {
        if name.ends_with(".push.json") {
            // a message with no eventType is not a storage notification: a dead letter
            replays += replay(&mut problems, name, events::parse_gcs_push(body), "error");
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(body).expect("published JSON");
        let field = |k: &str| match &v[k] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let (bucket, key) = (field("bucket"), field("name"));
        for (event_type, verdict, extra) in [
            ("OBJECT_FINALIZE", "Upsert", None),
            (
                "OBJECT_FINALIZE",
                "Upsert",
                Some(("overwroteGeneration", "1")),
            ),
            ("OBJECT_METADATA_UPDATE", "Upsert", None),
            ("OBJECT_DELETE", "Delete", None),
            ("OBJECT_ARCHIVE", "Delete", None),
            (
                "OBJECT_DELETE",
                "ignore overwritten",
                Some(("overwrittenByGeneration", "9")),
            ),
        ] {
            let mut attrs: BTreeMap<String, String> = [
                (
                    "notificationConfig",
                    format!("projects/_/buckets/{bucket}/notificationConfigs/1"),
                ),
                ("eventType", event_type.to_string()),
                ("payloadFormat", "JSON_API_V1".to_string()),
                ("bucketId", bucket.clone()),
                ("objectId", key.clone()),
                ("objectGeneration", field("generation")),
                ("eventTime", "2020-04-23T07:38:57.230Z".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            if let Some((k, v)) = extra {
                attrs.insert(k.into(), v.into());
            }
            let want = match verdict {
                "ignore overwritten" => verdict.to_string(),
                kind => format!("{kind} {bucket}/{key}"),
            };
            let what = format!("{name} as {event_type} {extra:?}");
            let pulled: HashMap<String, String> = attrs.clone().into_iter().collect();
            let got = events::parse_gcs(&pulled, body.as_bytes());
            replays += replay(&mut problems, &format!("{what} (pulled)"), got, &want);
            let got = events::parse_gcs_push(&push_wrap(&attrs, body.as_bytes()));
            replays += replay(&mut problems, &format!("{what} (pushed)"), got, &want);
        }
    }
    assert!(
        problems.is_empty(),
        "published GCS payloads:\n  {}",
        problems.join("\n  ")
    );
    eprintln!("{} published GCS payloads, {replays} replays", files.len());
}
