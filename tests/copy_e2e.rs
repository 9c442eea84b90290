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
        summary.contains(&format!("copied {} objects", data.len())),
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
        stdout(&out).contains("copied 1 objects, 60.00 MiB"),
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
