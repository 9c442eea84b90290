//! Bad input and failures: one clear line naming the culprit, the right exit code, and nothing
//! partial left visible at the destination.

mod common;

use common::*;

fn fails_with(args: &[&str], code: i32, needles: &[&str]) -> String {
    let mut c = slate();
    c.args(args);
    let out = c.output().expect("run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks {n:?}: {err}");
    }
    assert_eq!(err.trim().lines().count(), 1, "one line expected: {err}");
    err
}

#[test]
fn bad_urls_and_options_exit_2_naming_the_culprit() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().display().to_string();
    fails_with(
        &["copy", "ftp://host/x", &d],
        2,
        &["ftp://host/x", "unknown scheme"],
    );
    fails_with(&["copy", "s3://", &d], 2, &["s3://", "missing bucket"]);
    fails_with(&["copy", &d, "gs://b/../x"], 2, &["gs://b/../x"]);
    fails_with(
        &["copy", &d, "s3://slate-dst/x", "--chunk-size", "3MiB"],
        2,
        &["--chunk-size"],
    );
    fails_with(
        &["copy", &d, "s3://slate-dst/x", "--transfers", "0"],
        2,
        &["--transfers"],
    );
    fails_with(
        &["copy", "/definitely/not/here", &d],
        2,
        &["/definitely/not/here"],
    );
}

#[test]
fn missing_buckets_exit_2_naming_the_bucket() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("f"), b"x").expect("write");
    let d = dir.path().display().to_string();
    fails_with(
        &["copy", "s3://no-such-bucket-slate/x", &d],
        2,
        &["s3://no-such-bucket-slate"],
    );
    fails_with(
        &["copy", &d, "s3://no-such-bucket-slate/x"],
        2,
        &["s3://no-such-bucket-slate"],
    );
    fails_with(
        &["copy", "az://no-such-container/x", &d],
        2,
        &["az://no-such-container"],
    );
    fails_with(
        &["copy", &d, "gs://no-such-bucket-slate/x"],
        2,
        &["gs://no-such-bucket-slate"],
    );
    fails_with(
        &["copy", "s3://slate-src/no/such/prefix/at/all", &d],
        2,
        &["s3://slate-src/no/such/prefix/at/all"],
    );
}

#[test]
fn missing_credentials_exit_2_and_never_print_secrets() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().display().to_string();
    let mut c = slate();
    c.env_remove("AWS_ACCESS_KEY_ID")
        .env("AWS_SECRET_ACCESS_KEY", "sekr1t-value-xyz");
    c.args(["copy", "s3://slate-src/x", &d]);
    let out = c.output().expect("run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("missing credentials")
            && err.contains("s3://slate-src/x")
            && err.contains("AWS_ACCESS_KEY_ID"),
        "{err}"
    );
    assert!(!err.contains("sekr1t"), "secret leaked: {err}");

    let mut c = slate();
    c.env_remove("AZURE_STORAGE_USE_EMULATOR")
        .args(["copy", "az://slate-src/x", &d]);
    let err = stderr(&c.output().expect("run"));
    assert!(
        err.contains("missing credentials") && err.contains("az://slate-src/x"),
        "{err}"
    );

    let mut c = slate();
    c.env_remove("STORAGE_EMULATOR_HOST")
        .env("HOME", "/nonexistent")
        .args(["copy", "gs://slate-src/x", &d]);
    let err = stderr(&c.output().expect("run"));
    assert!(
        err.contains("missing credentials") && err.contains("GOOGLE_APPLICATION_CREDENTIALS"),
        "{err}"
    );

    // a connection string with a key: the key never shows, even when the string is malformed
    let mut c = slate();
    c.env_remove("AZURE_STORAGE_USE_EMULATOR")
        .env(
            "AZURE_STORAGE_CONNECTION_STRING",
            "AccountName=devstoreaccount1;AccountKeyTOPSECRETVALUE",
        )
        .args(["copy", "az://slate-src/x", &d]);
    let out = c.output().expect("run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("AZURE_STORAGE_CONNECTION_STRING") && !err.contains("TOPSECRETVALUE"),
        "{err}"
    );
}

#[test]
fn keys_escaping_a_local_root_are_refused() {
    // fake-gcs-server stores any name given to its JSON upload API, so the hostile keys can be
    // made there; the other objects of the prefix must still not land outside the root.
    let prefix = unique("evil");
    for name in [
        format!("{prefix}/ok.txt"),
        format!("{prefix}/../../../escaped.txt"),
        format!("{prefix}/a/../../x.txt"),
    ] {
        gcs_upload_any_name("slate-src", &name, "payload");
    }
    let outer = tempfile::tempdir().expect("tmp");
    let root = outer.path().join("a/b/c/root");
    let mut c = slate();
    c.env("STORAGE_EMULATOR_HOST", gcs_endpoint()).args([
        "copy",
        &format!("gs://slate-src/{prefix}"),
        &root.display().to_string(),
    ]);
    let out = c.output().expect("run");
    let err = stderr(&out);
    assert_ne!(
        out.status.code(),
        Some(0),
        "hostile keys must not pass silently: {err}"
    );
    assert!(err.contains(".."), "the error names the key: {err}");
    let everything = read_local(outer.path());
    for k in everything.keys() {
        assert!(
            k.starts_with("a/b/c/root/"),
            "written outside the root: {k}"
        );
    }
}

/// Starts a copy of a 150 MiB object, interrupts it early, and checks that the destination
/// holds either nothing or the complete object, never a torn one.
fn interrupted(dst_end: &str, signal: i32) -> (Option<i32>, Vec<u8>, String) {
    let data = bytes(42, 150 * MIB + 1);
    let dir = tempfile::tempdir().expect("tmp");
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("big.bin"), &data).expect("write");
    let dst = match dst_end {
        "local" => {
            // through S3, so that the copy takes long enough to interrupt
            let prefix = unique("int-src");
            rt().block_on(seed(
                &s3("slate-src"),
                &prefix,
                &[("big.bin".to_string(), data.clone())].into(),
            ));
            let d = dir.path().join("dst");
            let mut c = slate();
            c.args([
                "copy",
                &format!("s3://slate-src/{prefix}"),
                &d.display().to_string(),
                "--chunk-size",
                "5MiB",
                "--streams",
                "1",
                "--quiet",
            ]);
            (c, d.display().to_string())
        }
        _ => {
            let prefix = unique("int-dst");
            let mut c = slate();
            c.args([
                "copy",
                &src.display().to_string(),
                &format!("s3://slate-dst/{prefix}"),
                "--chunk-size",
                "5MiB",
                "--streams",
                "1",
                "--quiet",
            ]);
            (c, prefix)
        }
    };
    let (mut cmd, where_) = dst;
    let mut child = cmd.spawn().expect("spawn");
    // the signal lands once the copy writes (a temp file, a multipart upload), not on a guess
    let dst_dir = dir.path().join("dst");
    wait_for("the copy to begin writing", 60, || match dst_end {
        "local" => std::fs::read_dir(&dst_dir).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(".slate-tmp"))
        }),
        _ => s3_raw("GET", &format!("/slate-dst?uploads&prefix={where_}"), "")
            .1
            .contains("<UploadId>"),
    });
    // SAFETY: plain kill(2) on our own child, not reaped yet.
    unsafe { libc::kill(child.id() as i32, signal) };
    let status = child.wait().expect("wait");
    // proof that it landed mid-run: the copy did not finish on its own
    use std::os::unix::process::ExitStatusExt;
    match signal {
        libc::SIGKILL => assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}"),
        _ => assert_eq!(status.code(), Some(130), "{status:?}"),
    }
    let got = if dst_end == "local" {
        let all = read_local(std::path::Path::new(&where_));
        for k in all.keys() {
            // an interrupted copy keeps what it wrote of a large object, for the next run to
            // continue (`.slate-tmp-r-…`, recorded in the database); nothing else
            assert!(
                !k.starts_with(".slate-tmp")
                    || signal == libc::SIGKILL
                    || k.starts_with(".slate-tmp-r-"),
                "temp file left after SIGINT: {k}"
            );
            assert!(
                k == "big.bin" || k.starts_with(".slate-tmp"),
                "unexpected file {k}"
            );
        }
        all.get("big.bin").cloned().unwrap_or_default()
    } else {
        rt().block_on(read_all(&s3("slate-dst"), &where_))
            .remove("big.bin")
            .unwrap_or_default()
    };
    assert!(
        got.is_empty() || got == data,
        "torn object visible: {} bytes of {}",
        got.len(),
        data.len()
    );
    (status.code(), got, where_)
}

#[test]
fn interrupted_copies_leave_no_torn_object() {
    interrupted("local", libc::SIGINT);
    interrupted("local", libc::SIGKILL);
    interrupted("s3", libc::SIGKILL);
    interrupted("s3", libc::SIGINT);
}

#[test]
fn one_failing_object_fails_alone_with_exit_1() {
    // The destination already has a folder where one object must go: that object fails with
    // its name on stderr, the others are copied, and the exit code is 1.
    let dir = tempfile::tempdir().expect("tmp");
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("good.txt"), b"good").expect("write");
    std::fs::write(src.join("blocked"), b"blocked").expect("write");
    let dst = dir.path().join("dst");
    std::fs::create_dir_all(dst.join("blocked/inside")).expect("mkdir");
    let out = copy(&src.display().to_string(), &dst.display().to_string(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("blocked"), "{}", stderr(&out));
    assert!(stdout(&out).contains("1 FAILED"), "{}", stdout(&out));
    assert_eq!(
        std::fs::read(dst.join("good.txt")).expect("good copied"),
        b"good"
    );
    assert!(dst.join("blocked/inside").is_dir());
    let names: Vec<_> = std::fs::read_dir(&dst)
        .expect("ls")
        .map(|e| e.expect("e").file_name())
        .collect();
    assert_eq!(names.len(), 2, "no temp file left: {names:?}");
}

#[test]
fn help_lists_environment_and_memory_bound() {
    let mut c = slate();
    c.args(["copy", "--help"]);
    let out = c.output().expect("run");
    let text = stdout(&out);
    for v in [
        "AWS_ENDPOINT_URL",
        "AZURE_STORAGE_CONNECTION_STRING",
        "STORAGE_EMULATOR_HOST",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AZURITE_BLOB_STORAGE_URL",
        "Memory:",
    ] {
        assert!(text.contains(v), "--help lacks {v}");
    }
}

/// How a test changes a file while it is being copied.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// A new file renamed over it (what editors, `rsync` and `cp` to a temp name do).
    Replace,
    /// New bytes written over the old ones in place, the size kept.
    Rewrite,
}

/// Copies a 40 MiB file under a bandwidth limit, changes it once the copy is under way (a
/// destination temp file or a multipart upload exists), and checks what landed: the copy
/// must fail naming the change, and nothing at the destination may be a mix of the two
/// versions; a second copy then lands the new version whole.
fn changed_during_copy(change: Change, to_s3: bool) {
    let (v1, v2) = (bytes(7, 40 * MIB), bytes(8, 40 * MIB));
    let dir = tempfile::tempdir().expect("tmp");
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    let file = src.join("big.bin");
    std::fs::write(&file, &v1).expect("write");
    let local_dst = dir.path().join("dst");
    let prefix = unique("stitch");
    let dst = match to_s3 {
        true => format!("s3://slate-dst/{prefix}"),
        false => local_dst.display().to_string(),
    };
    let src_url = src.display().to_string();
    let args = [
        "copy",
        src_url.as_str(),
        dst.as_str(),
        "--chunk-size",
        "8MiB",
        "--streams",
        "2",
        "--bwlimit",
        "10M",
        "--quiet",
    ];
    let mut c = slate();
    c.args(args).stderr(std::process::Stdio::piped());
    let child = c.spawn().expect("spawn");
    let under_way = || match to_s3 {
        true => s3_raw("GET", &format!("/slate-dst?uploads&prefix={prefix}"), "")
            .1
            .contains("<UploadId>"),
        false => std::fs::read_dir(&local_dst).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(".slate-tmp"))
        }),
    };
    wait_for("the copy to begin writing", 60, under_way);
    match change {
        Change::Replace => {
            let next = src.join(".next");
            std::fs::write(&next, &v2).expect("write v2");
            std::fs::rename(&next, &file).expect("rename");
        }
        Change::Rewrite => {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&file)
                .expect("open");
            f.write_all_at(&v2, 0).expect("rewrite");
        }
    }
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let landed = || match to_s3 {
        true => rt()
            .block_on(read_all(&s3("slate-dst"), &prefix))
            .remove("big.bin"),
        false => read_local(&local_dst).remove("big.bin"),
    };
    let got = landed();
    if let Some(got) = &got {
        assert!(
            *got == v1 || *got == v2,
            "{change:?}: a mix of two versions landed ({} bytes)",
            got.len()
        );
    }
    // at 10 MB/s the change lands seconds before the last chunk is read
    assert_eq!(out.status.code(), Some(1), "{change:?}: {err}");
    assert!(
        got.is_none(),
        "{change:?}: an object landed from a failed copy"
    );
    assert!(
        err.contains("source file changed during the copy"),
        "{change:?}: {err}"
    );
    // the next run copies the version there is now, whole
    let again = copy(&src_url, &dst, &["--quiet"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(landed() == Some(v2), "{change:?}: the second copy");
}

#[test]
fn a_file_changed_during_its_copy_never_lands_a_mix() {
    changed_during_copy(Change::Replace, false);
    changed_during_copy(Change::Rewrite, false);
    changed_during_copy(Change::Replace, true);
    changed_during_copy(Change::Rewrite, true);
}
