//! `slate copy` end to end through the real emulators: every direction they allow, with a
//! multi-chunk odd-sized object, zero-byte objects, awkward keys and many small objects;
//! content compared byte for byte by reading the destination back independently.

mod common;

use std::collections::BTreeMap;

use common::*;

/// Seeds `src`, copies it to `dst` with `extra` flags, and checks the destination equals the
/// source exactly (no missing, extra, or different object; no temp file left behind).
fn roundtrip(src: End, dst: End, small: usize, extra: &[&str]) -> String {
    let data = dataset(small);
    let s = Place::new(src, "src");
    let d = Place::new(dst, "dst");
    s.seed(&data);
    let out = copy(&s.url(), &d.url(), extra);
    assert!(
        out.status.success(),
        "copy {:?} -> {:?} failed: {}",
        src,
        dst,
        stderr(&out)
    );
    assert_same(&d.read(), &data);
    let summary = stdout(&out);
    assert!(
        summary.contains(&format!("copied {0} ({0} new", data.len())),
        "summary: {summary}"
    );
    summary
}

#[test]
fn local_to_s3_and_back() {
    roundtrip(End::Local, End::S3("slate-dst"), 60, &["--verify"]);
    roundtrip(End::S3("slate-src"), End::Local, 60, &["--verify"]);
}

#[test]
fn local_to_azure_and_back() {
    roundtrip(End::Local, End::Az("slate-dst"), 40, &["--verify"]);
    roundtrip(End::Az("slate-src"), End::Local, 40, &[]);
}

#[test]
fn local_to_gcs_and_back() {
    roundtrip(End::Local, End::Gs("slate-dst"), 40, &["--verify"]);
    roundtrip(End::Gs("slate-src"), End::Local, 40, &["--verify"]);
}

#[test]
fn across_clouds() {
    roundtrip(
        End::S3("slate-src"),
        End::Az("slate-dst"),
        20,
        &["--verify"],
    );
    roundtrip(End::Az("slate-src"), End::Gs("slate-dst"), 20, &[]);
    roundtrip(
        End::Gs("slate-src"),
        End::S3("slate-dst"),
        20,
        &["--verify"],
    );
}

#[test]
fn across_clouds_the_other_way() {
    // with `across_clouds`, every ordered pair of the three clouds
    roundtrip(End::S3("slate-src"), End::Gs("slate-dst"), 10, &[]);
    roundtrip(
        End::Az("slate-src"),
        End::S3("slate-dst"),
        10,
        &["--verify"],
    );
    roundtrip(
        End::Gs("slate-src"),
        End::Az("slate-dst"),
        10,
        &["--verify"],
    );
    roundtrip(
        End::Gs("slate-src"),
        End::Gs("slate-dst"),
        10,
        &["--verify"],
    );
}

#[test]
fn between_buckets_of_one_cloud() {
    // S3 copies across buckets of one endpoint server-side (CopyObject); keys with spaces,
    // `+`, `%` and unicode must survive the x-amz-copy-source encoding.
    let summary = roundtrip(
        End::S3("slate-src"),
        End::S3("slate-dst"),
        20,
        &["--verify"],
    );
    assert!(summary.contains("server-side"), "{summary}");
    // asked not to, every byte passes through slate (a GET and a PUT each)
    let summary = roundtrip(
        End::S3("slate-src"),
        End::S3("slate-dst"),
        20,
        &["--verify", "--no-server-side-copy"],
    );
    assert!(!summary.contains("server-side"), "{summary}");
    roundtrip(End::Az("slate-src"), End::Az("slate-dst"), 20, &[]);
}

#[test]
fn within_one_bucket_is_server_side() {
    for end in [
        End::S3("slate-src"),
        End::Az("slate-src"),
        End::Gs("slate-src"),
    ] {
        let summary = roundtrip(end, end, 10, &["--verify"]);
        assert!(summary.contains("server-side"), "{end:?}: {summary}");
    }
    let summary = roundtrip(
        End::S3("slate-src"),
        End::S3("slate-src"),
        10,
        &["--verify", "--no-server-side-copy"],
    );
    assert!(!summary.contains("server-side"), "{summary}");
}

#[test]
fn local_to_local() {
    roundtrip(End::Local, End::Local, 200, &["--verify"]);
}

#[test]
fn many_small_objects() {
    // 1,500 objects: S3 -> Azure moves every one as a GET + PUT with many in flight;
    // S3 -> S3 across buckets makes one CopyObject each.
    let data: BTreeMap<String, Vec<u8>> = (0..1500)
        .map(|i| {
            (
                format!("many/{:03}/{i}", i % 50),
                bytes(i, 1 + (i as usize * 7) % 4096),
            )
        })
        .collect();
    let s = Place::new(End::S3("slate-src"), "many");
    s.seed(&data);
    for dst in [End::Az("slate-dst"), End::S3("slate-dst")] {
        let d = Place::new(dst, "many");
        let out = copy(&s.url(), &d.url(), &["--transfers", "64"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_same(&d.read(), &data);
    }
}

#[test]
fn copying_again_overwrites_in_place() {
    let data = dataset(5);
    let s = Place::new(End::S3("slate-src"), "again");
    let d = Place::new(End::Local, "again");
    s.seed(&data);
    assert!(copy(&s.url(), &d.url(), &[]).status.success());
    // change one object at the source, same size
    let mut changed = data.clone();
    changed.insert("large/odd.bin".into(), bytes(77, 12 * MIB + 12_345));
    s.seed(&changed);
    assert!(copy(&s.url(), &d.url(), &[]).status.success());
    assert_same(&d.read(), &changed);
}

#[test]
fn single_object_into_folder_or_to_a_name() {
    let data: BTreeMap<String, Vec<u8>> =
        [("w/model.bin".to_string(), bytes(9, 7 * MIB + 3))].into();
    let s = Place::new(End::S3("slate-src"), "single");
    s.seed(&data);
    let obj = format!("{}/w/model.bin", s.url());

    // into an existing local folder, and into a folder named with a trailing slash
    let dir = tempfile::tempdir().expect("tmp");
    assert!(copy(&obj, &dir.path().display().to_string(), &[])
        .status
        .success());
    assert_eq!(
        std::fs::read(dir.path().join("model.bin")).expect("copied"),
        data["w/model.bin"]
    );
    let sub = format!("{}/new/", dir.path().display());
    assert!(copy(&obj, &sub, &[]).status.success());
    assert_eq!(
        std::fs::read(dir.path().join("new/model.bin")).expect("copied"),
        data["w/model.bin"]
    );
    // to an exact local file name
    let file = dir.path().join("renamed.bin");
    assert!(copy(&obj, &file.display().to_string(), &["--verify"])
        .status
        .success());
    assert_eq!(std::fs::read(&file).expect("copied"), data["w/model.bin"]);
    // to an exact object name in another cloud
    let d = Place::new(End::Az("slate-dst"), "single");
    assert!(copy(&obj, &format!("{}/weights.bin", d.url()), &[])
        .status
        .success());
    let got = d.read();
    assert_eq!(got.keys().collect::<Vec<_>>(), vec!["weights.bin"]);
    assert_eq!(got["weights.bin"], data["w/model.bin"]);
}

#[test]
fn estimate_moves_nothing_and_counts_exactly() {
    let data = dataset(30);
    let total: usize = data.values().map(Vec::len).sum();
    let s = Place::new(End::S3("slate-src"), "est");
    let d = Place::new(End::Gs("slate-dst"), "est");
    s.seed(&data);
    let out = copy(&s.url(), &d.url(), &["--estimate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("objects:   {}", data.len())),
        "{text}"
    );
    assert!(text.contains(&format!("bytes:     {total} ")), "{text}");
    // two objects are larger than nothing: the 12 MiB one takes 3 GETs and 1+3+1 writes
    assert!(
        text.contains("requests:") && text.contains("egress (s3->gs at $0.09/GiB)"),
        "{text}"
    );
    assert!(d.read().is_empty(), "estimate wrote to the destination");
}

#[test]
fn estimate_prices_come_from_the_config_file() {
    let data = dataset(3);
    let s = Place::new(End::Az("slate-src"), "estcfg");
    s.seed(&data);
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = dir.path().join("slate.toml");
    std::fs::write(&cfg, "[pricing]\negress_per_gib = { \"az->s3\" = 2.5 }\n").expect("cfg");
    let cfg = cfg.display().to_string();
    let out = copy(
        &s.url(),
        "s3://slate-dst/never-written",
        &["--estimate", "--config", &cfg],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("(az->s3 at $2.5/GiB)"),
        "{}",
        stdout(&out)
    );

    std::fs::write(&cfg, "[pricing]\negres_per_gib = {}\n").expect("cfg");
    let out = copy(
        &s.url(),
        "s3://slate-dst/never-written",
        &["--estimate", "--config", &cfg],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("slate.toml") && err.contains("line 2") && err.contains("egres_per_gib"),
        "{err}"
    );
}

#[test]
fn progress_lines_when_not_a_terminal() {
    let data: BTreeMap<String, Vec<u8>> = [("p/big.bin".to_string(), bytes(5, 60 * MIB))].into();
    let s = Place::new(End::S3("slate-src"), "prog");
    let d = Place::new(End::Local, "prog");
    s.seed(&data);
    // one stream, so the copy lasts more than a second even on a fast machine
    let mut c = slate();
    c.args([
        "copy",
        &s.url(),
        &d.url(),
        "--progress-lines",
        "1",
        "--streams",
        "1",
        "--chunk-size",
        "5MiB",
    ]);
    let out = run(c);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let last = err
        .lines()
        .rfind(|l| l.starts_with("progress: "))
        .unwrap_or_else(|| panic!("no progress lines: {err}"));
    assert!(
        last.starts_with("progress: 1/1 objects, 60.00 MiB/60.00 MiB"),
        "{last}"
    );
    assert!(
        stdout(&out).contains("copied 1 (1 new, 0 changed, 60.00 MiB)"),
        "{}",
        stdout(&out)
    );
    let q = copy(&s.url(), &d.url(), &["--quiet"]);
    assert!(
        q.status.success() && q.stdout.is_empty() && q.stderr.is_empty(),
        "--quiet printed something"
    );
}

#[test]
fn folder_markers_become_folders_locally() {
    // Consoles create zero-byte "folder/" keys; object_store lists them without the slash.
    // fake-gcs-server's JSON upload stores any name, so the marker can be made there.
    let prefix = unique("markers");
    for (name, body) in [
        (format!("{prefix}/a/"), ""),
        (format!("{prefix}/a/x.txt"), "x"),
        (format!("{prefix}/b/"), ""),
        (format!("{prefix}/b/c/"), ""),
        (format!("{prefix}/b/c/y.txt"), "y"),
    ] {
        gcs_upload_any_name("slate-src", &name, body);
    }
    for transfers in ["1", "16"] {
        let dir = tempfile::tempdir().expect("tmp");
        let out = copy(
            &format!("gs://slate-src/{prefix}"),
            &dir.path().display().to_string(),
            &["--transfers", transfers],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            std::fs::read(dir.path().join("a/x.txt")).expect("a/x.txt"),
            b"x"
        );
        assert_eq!(
            std::fs::read(dir.path().join("b/c/y.txt")).expect("b/c/y.txt"),
            b"y"
        );
    }
}

/// `copy SRC DST` once, then again: the summary line.
fn copy_line(src: &str, dst: &str, extra: &[&str]) -> String {
    let out = copy(src, dst, extra);
    assert!(
        out.status.success(),
        "copy {src} -> {dst}: {}",
        stderr(&out)
    );
    stdout(&out)
        .lines()
        .rfind(|l| l.starts_with("copy: "))
        .unwrap_or_else(|| panic!("no summary: {}", stdout(&out)))
        .to_string()
}

fn small_set(n: usize, seed: u64) -> BTreeMap<String, Vec<u8>> {
    (0..n)
        .map(|i| {
            (
                format!("s/{i:03}.bin"),
                bytes(seed + i as u64, 100 + i * 13),
            )
        })
        .collect()
}

#[test]
fn a_second_copy_moves_nothing_and_a_changed_one_moves_the_changes() {
    for (src_end, dst_end) in [
        (End::Local, End::S3("slate-dst")),
        (End::Az("slate-src"), End::S3("slate-dst")),
        (End::S3("slate-src"), End::Local),
    ] {
        let ctx = format!("{src_end:?} -> {dst_end:?}");
        let n = 20;
        let mut data = small_set(n, 10);
        let (s, d) = (
            Place::new(src_end, "again-src"),
            Place::new(dst_end, "again-dst"),
        );
        s.seed(&data);
        let line = copy_line(&s.url(), &d.url(), &[]);
        assert!(
            line.contains(&format!("copied {n} ({n} new")),
            "{ctx}: {line}"
        );
        let line = copy_line(&s.url(), &d.url(), &[]);
        assert!(
            line.contains("copied 0 (0 new, 0 changed, 0 B)")
                && line.contains(&format!("skipped {n}")),
            "{ctx}: {line}"
        );
        // five changes: two new keys, two overwritten with other sizes, one rewritten with the
        // same size (a new modification time and other bytes)
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let mut changes = BTreeMap::new();
        changes.insert("s/new-1.bin".to_string(), bytes(501, 10));
        changes.insert("s/new-2.bin".to_string(), bytes(502, 20));
        changes.insert("s/000.bin".to_string(), bytes(503, 999));
        changes.insert("s/001.bin".to_string(), bytes(504, 998));
        changes.insert("s/002.bin".to_string(), bytes(505, data["s/002.bin"].len()));
        s.seed(&changes);
        data.extend(changes);
        let line = copy_line(&s.url(), &d.url(), &[]);
        assert!(
            line.contains("copied 5 (2 new, 3 changed")
                && line.contains(&format!("skipped {}", n - 3)),
            "{ctx}: {line}"
        );
        assert_same(&d.read(), &data);
        // a key --ignore-existing skips is not recorded as equal: the next copy compares it
        let grown = ("s/003.bin".to_string(), bytes(506, 4321));
        s.seed(&BTreeMap::from([grown.clone()]));
        let line = copy_line(&s.url(), &d.url(), &["--ignore-existing"]);
        assert!(line.contains("copied 0 (0 new, 0 changed"), "{ctx}: {line}");
        let line = copy_line(&s.url(), &d.url(), &[]);
        assert!(line.contains("copied 1 (0 new, 1 changed"), "{ctx}: {line}");
        data.insert(grown.0, grown.1);
        assert_same(&d.read(), &data);
        // what only the destination holds is left
        d.seed(&BTreeMap::from([("only-here".to_string(), b"x".to_vec())]));
        let line = copy_line(&s.url(), &d.url(), &[]);
        assert!(
            line.contains("1 only at the destination (left"),
            "{ctx}: {line}"
        );
        assert!(d.read().contains_key("only-here"), "{ctx}");
    }
}

#[test]
fn rclone_rules_without_a_manifest() {
    // Azure → S3 as the seed's migration, with no manifest to vouch: rclone's rules decide
    let n = 12;
    let data = small_set(n, 30);
    let (s, d) = (
        Place::new(End::Az("slate-src"), "rules-src"),
        Place::new(End::S3("slate-dst"), "rules-dst"),
    );
    s.seed(&data);
    let line = copy_line(&s.url(), &d.url(), &["--no-manifest"]);
    assert!(line.contains(&format!("copied {n} ({n} new")), "{line}");
    // size and modification time (the one slate recorded at the destination, as rclone's)
    let line = copy_line(&s.url(), &d.url(), &["--no-manifest"]);
    assert!(
        line.contains(&format!(
            "skipped {n} ({n} equal: {n} by size and modification time)"
        )),
        "{line}"
    );
    // another client rewrites a destination object with other bytes of the same size: its
    // time is newer than the source's, so the default rule keeps it; --checksum reads both
    let victim = "s/004.bin";
    d.seed(&BTreeMap::from([(
        victim.to_string(),
        bytes(999, data[victim].len()),
    )]));
    let line = copy_line(&s.url(), &d.url(), &["--no-manifest", "--dry-run"]);
    assert!(line.contains("would copy 0"), "{line}");
    let out = copy(
        &s.url(),
        &d.url(),
        &["--no-manifest", "--checksum", "--dry-run"],
    );
    assert_eq!(
        stdout(&out)
            .lines()
            .filter(|l| l.starts_with("copy (changed): "))
            .collect::<Vec<_>>(),
        vec![format!("copy (changed): {victim}")]
    );
    assert_ne!(d.read()[victim], data[victim], "a dry run copied");
    let line = copy_line(&s.url(), &d.url(), &["--no-manifest", "--checksum"]);
    assert!(line.contains("copied 1 (0 new, 1 changed"), "{line}");
    assert_same(&d.read(), &data);
    // --ignore-existing leaves what the destination holds, changed or not
    s.seed(&BTreeMap::from([("s/005.bin".to_string(), bytes(77, 5))]));
    let line = copy_line(&s.url(), &d.url(), &["--no-manifest", "--ignore-existing"]);
    assert!(
        line.contains("copied 0")
            && line.contains(&format!("{n} already at the destination, not compared")),
        "{line}"
    );
    assert_eq!(d.read()["s/005.bin"], data["s/005.bin"]);
    // --ignore-times copies everything again
    let line = copy_line(&s.url(), &d.url(), &["--no-manifest", "--ignore-times"]);
    assert!(
        line.contains(&format!("copied {n} (0 new, {n} changed")),
        "{line}"
    );
    assert_eq!(d.read()["s/005.bin"], bytes(77, 5));
}

/// HEAD requests moto served for keys under `prefix` since the log had `from` bytes.
fn moto_heads(prefix: &str, from: u64) -> usize {
    let log = std::path::Path::new(
        &std::env::var("SLATE_RUN_DIR").expect("SLATE_RUN_DIR (scripts/services.sh env)"),
    )
    .join("moto.log");
    let text = std::fs::read(&log).expect("moto.log");
    let tail = String::from_utf8_lossy(&text[(from as usize).min(text.len())..]).to_string();
    tail.lines()
        .filter(|l| l.contains("\"HEAD ") && l.contains(prefix))
        .count()
}

fn moto_log_len() -> u64 {
    let log = std::path::Path::new(&std::env::var("SLATE_RUN_DIR").expect("SLATE_RUN_DIR"))
        .join("moto.log");
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

#[test]
fn a_sync_after_a_copy_asks_no_head_per_object() {
    let n = 15;
    let data = small_set(n, 50);
    let s = Place::new(End::Az("slate-src"), "seeded-src");
    s.seed(&data);
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    // the copy seeds the manifest (its --db); the sync after it finds every key vouched for
    let d = Place::new(End::S3("slate-dst"), "seeded-dst");
    let mut c = slate_db(&db);
    c.args(["copy", &s.url(), &d.url()]);
    assert!(run(c).status.success());
    let from = moto_log_len();
    let mut c = slate_db(&db);
    // the copy left the pair unreconciled: even trusting the manifest, the destination is
    // listed (what only it holds is for this sync to judge)
    c.args(["sync", "--once", &s.url(), &d.url(), "--trust-manifest"]);
    let out = run(c);
    assert!(out.status.success());
    assert!(
        stdout(&out).contains(&format!("destination {n} listed")),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains(&format!("{n} equal ({n} by the manifest)")),
        "{}",
        stdout(&out)
    );
    assert_eq!(moto_heads(&d.prefix, from), 0, "HEADs after a seeded copy");
    // a throwaway copy (--no-manifest) leaves the sync to compare each key: a HEAD each
    let d2 = Place::new(End::S3("slate-dst"), "unseeded-dst");
    let mut c = slate_db(&db);
    c.args(["copy", &s.url(), &d2.url(), "--no-manifest"]);
    assert!(run(c).status.success());
    let from = moto_log_len();
    let mut c = slate_db(&db);
    c.args(["sync", "--once", &s.url(), &d2.url()]);
    let out = run(c);
    assert!(out.status.success());
    assert!(
        stdout(&out).contains(&format!("{n} by size and modification time")),
        "{}",
        stdout(&out)
    );
    assert!(
        moto_heads(&d2.prefix, from) >= n,
        "a HEAD per key without the manifest"
    );
}

#[test]
fn copy_filters_as_rclone_spells_them() {
    let s = Place::new(End::Local, "filters-src");
    let data: BTreeMap<String, Vec<u8>> = [
        ("a.bin", 10),
        ("b.bin", 2000),
        ("c.tmp", 500),
        ("d/e.bin", 300),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), bytes(n as u64, n)))
    .collect();
    s.seed(&data);
    let d = Place::new(End::S3("slate-dst"), "filters-dst");
    let line = copy_line(
        &s.url(),
        &d.url(),
        &[
            "--min-size",
            "100",
            "--max-size",
            "1k",
            "--exclude",
            "*.tmp",
        ],
    );
    assert!(line.contains("copied 1 (1 new"), "{line}");
    assert_eq!(d.read().keys().collect::<Vec<_>>(), vec!["d/e.bin"]);
    let dir = tempfile::tempdir().expect("tmp");
    let list = dir.path().join("files.txt");
    std::fs::write(&list, "# the one wanted\na.bin\n").expect("list");
    let line = copy_line(
        &s.url(),
        &d.url(),
        &["--files-from", &list.display().to_string()],
    );
    assert!(line.contains("copied 1 (1 new"), "{line}");
    assert_eq!(
        d.read().keys().collect::<Vec<_>>(),
        vec!["a.bin", "d/e.bin"]
    );
    // an rclone flag slate lacks: one line naming it and what to use, exit 2
    let out = copy(&s.url(), &d.url(), &["--checkers", "64"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.lines().count() == 1
            && err.contains("--checkers is rclone's flag")
            && err.contains("--transfers"),
        "{err}"
    );
}

#[test]
fn objects_in_archive_tiers_are_skipped_with_one_line_each_not_failed() {
    // two objects S3 must restore before anyone reads them, one readable
    let src = Place::new(End::S3("slate-src"), "archived");
    for (k, class) in [
        ("a/cold.bin", Some("GLACIER")),
        ("a/deep.bin", Some("DEEP_ARCHIVE")),
        ("a/warm.bin", None),
    ] {
        let mut h = vec![];
        if let Some(c) = class {
            h.push(("x-amz-storage-class", c));
        }
        let (status, _, body) = s3_signed(
            "PUT",
            &format!("/slate-src/{}/{k}", src.prefix),
            &h,
            "payload",
        );
        assert_eq!(status, 200, "{body}");
    }
    let dst = Place::new(End::Local, "archived-to");
    for args in [vec!["copy"], vec!["sync", "--once"]] {
        let out = run({
            let mut c = slate();
            c.args(&args).args([src.url(), dst.url()]);
            c
        });
        let err = format!("{}{}", stdout(&out), stderr(&out));
        assert!(out.status.success(), "{args:?}: {err}");
        assert!(
            err.contains("2 in archive tiers") && !err.contains("FAILED"),
            "{args:?}: {err}"
        );
        for k in ["cold.bin", "deep.bin"] {
            let lines: Vec<&str> = err
                .lines()
                .filter(|l| l.contains(&format!("a/{k}")))
                .collect();
            assert_eq!(lines.len(), 1, "{args:?}: one line for {k}: {err}");
            assert!(
                lines[0].contains("archive tier") && lines[0].contains("restore"),
                "{}",
                lines[0]
            );
        }
    }
    assert_eq!(dst.read().keys().collect::<Vec<_>>(), vec!["a/warm.bin"]);
}

/// LIST requests moto served for `bucket` with `prefix` in the query since `from`.
fn moto_lists(bucket: &str, prefix: &str, from: u64) -> usize {
    let log = std::path::Path::new(&std::env::var("SLATE_RUN_DIR").expect("SLATE_RUN_DIR"))
        .join("moto.log");
    let text = std::fs::read(&log).expect("moto.log");
    let tail = String::from_utf8_lossy(&text[(from as usize).min(text.len())..]).to_string();
    tail.lines()
        .filter(|l| l.contains(&format!("\"GET /{bucket}?")) && l.contains(prefix))
        .count()
}

#[test]
fn sync_once_estimate_counts_what_a_sync_would_do_and_changes_nothing() {
    let src = Place::new(End::Local, "est-src");
    src.seed(&small_set(12, 70));
    let dst = Place::new(End::S3("slate-dst"), "est-dst");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let estimate = |db: &std::path::Path| {
        let from = moto_log_len();
        let out = run({
            let mut c = slate_db(db);
            c.args(["sync", "--once", &src.url(), &dst.url(), "--estimate"]);
            c
        });
        assert!(out.status.success(), "{}", stderr(&out));
        (stdout(&out), moto_lists("slate-dst", &dst.prefix, from))
    };
    let (text, lists) = estimate(&db);
    assert!(text.contains("copy:      12 objects"), "{text}");
    assert!(text.contains("delete:    0 objects"), "{text}");
    // the requests it says it made are the ones the store served
    assert!(lists >= 1, "{text}");
    assert!(
        text.contains(&format!("requests made: LIST {lists}, HEAD 0,")),
        "moto served {lists} listings: {text}"
    );
    assert!(dst.read().is_empty(), "an estimate changes nothing");
    // after a sync, two gone and one changed at the source
    let out = run({
        let mut c = slate_db(&db);
        c.args(["sync", "--once", &src.url(), &dst.url(), "-q"]);
        c
    });
    assert!(out.status.success(), "{}", stderr(&out));
    let keys: Vec<String> = small_set(12, 70).into_keys().collect();
    std::fs::remove_file(src.root.join(&keys[0])).unwrap();
    std::fs::remove_file(src.root.join(&keys[1])).unwrap();
    std::fs::write(src.root.join(&keys[2]), b"changed, and of another size").unwrap();
    let (text, _) = estimate(&db);
    assert!(text.contains("copy:      1 objects, 28 B"), "{text}");
    assert!(text.contains("delete:    2 objects"), "{text}");
    assert_eq!(dst.read().len(), 12, "an estimate changes nothing");
}

#[test]
fn the_daemon_after_a_copy_starts_following_without_a_head_per_object() {
    // `slate copy`, then the daemon on the same pair and database: its start-up reconcile
    // finds every key vouched for by the rows the copy seeded
    let n = 12;
    let src = Place::new(End::Local, "dmn-seeded-src");
    src.seed(&small_set(n, 60));
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let start = |dst: &Place, log: &std::path::Path| {
        let mut c = slate_db(&db);
        c.args(["sync", &src.url(), &dst.url(), "--drift-check-secs", "0"])
            .args(["--delete-brake", "off"])
            .env("RUST_LOG", "slate=info,warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).expect("log"));
        spawn_daemon(c, log, 1)
    };
    for (copy_args, seeded) in [(vec![], true), (vec!["--no-manifest"], false)] {
        let dst = Place::new(End::S3("slate-dst"), "dmn-seeded-dst");
        let mut c = slate_db(&db);
        c.args(["copy", &src.url(), &dst.url(), "-q"])
            .args(&copy_args);
        assert!(run(c).status.success());
        let from = moto_log_len();
        let log = dir.path().join(format!("d-{seeded}.log"));
        let daemon = start(&dst, &log);
        let heads = moto_heads(&dst.prefix, from);
        assert_eq!(daemon.stop(libc::SIGTERM), Some(0), "{}", read_log(&log));
        if seeded {
            assert_eq!(
                heads,
                0,
                "HEADs at the daemon's start after a copy: {}",
                read_log(&log)
            );
        } else {
            // without the copy's rows each key is compared again: what the rows save
            assert!(heads >= n, "{heads} HEADs after a --no-manifest copy");
        }
    }
}
