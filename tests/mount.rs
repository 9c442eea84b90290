//! `slate mount` over real FUSE (fusermount3, /dev/fuse) against moto: every byte of
//! multi-part odd-sized objects read back through the mount, random reads, folders listed,
//! writes refused; coherence by the bucket's own events through a real SQS queue, with a
//! folder cache time of an hour (a PUT and a DELETE made with the store's client show within
//! 2 s); an open file reads one version; SIGTERM and `fusermount3 -u` unmount cleanly.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::mount::{mounted, Mounted};
use common::*;
use object_store::path::Path as StorePath;
use object_store::{ObjectStoreExt, PutPayload};

/// How long until `cond` holds (at most `secs` seconds, then the test fails naming `what`).
fn time_until(what: &str, secs: u64, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    wait_for(what, secs, &mut cond);
    start.elapsed()
}

fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn an_s3_bucket_mounts_reads_every_byte_and_follows_its_events() {
    let (bucket, queue) = sqs_bucket("mnt");
    let store = s3(&bucket);
    let big = bytes(1, 17 * 1024 * 1024 + 3);
    let files: BTreeMap<String, Vec<u8>> = [
        ("big.bin".to_string(), big.clone()),
        ("sub/mid.bin".to_string(), bytes(2, 300_001)),
        ("sub/deeper/s.txt".to_string(), b"small\n".to_vec()),
        ("open.txt".to_string(), bytes(3, 1000)),
    ]
    .into();
    rt().block_on(seed(&store, "data", &files));
    rt().block_on(async {
        store
            .put(
                &StorePath::from("outside.txt"),
                PutPayload::from_static(b"x"),
            )
            .await
            .expect("put")
    });
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("mnt");
    let log = tmp.path().join("mount.log");
    let src = format!("s3://{bucket}/data");
    let ev = format!("sqs://{queue}");
    let mut m = Mounted::start(
        &src,
        &dir,
        &log,
        &["--events", &ev, "--dir-cache-time", "1h", "--read-only"],
    );

    // folders, and every byte of each file
    assert_eq!(names(&dir), ["big.bin", "open.txt", "sub"]);
    assert_eq!(names(&dir.join("sub")), ["deeper", "mid.bin"]);
    for (k, v) in &files {
        let got = std::fs::read(dir.join(k)).unwrap_or_else(|e| panic!("{k}: {e}"));
        assert!(
            got == *v,
            "{k}: {} bytes read, {} at the store",
            got.len(),
            v.len()
        );
    }
    assert_eq!(
        std::fs::metadata(dir.join("big.bin")).expect("stat").len(),
        big.len() as u64
    );
    // random reads, one across the boundary of two parallel parts
    let mut f = std::fs::File::open(dir.join("big.bin")).expect("open");
    for off in [
        big.len() as u64 - 10,
        5,
        9_000_000,
        8 * 1024 * 1024 - 2,
        3 * 1024 * 1024,
    ] {
        f.seek(SeekFrom::Start(off)).expect("seek");
        let mut buf = vec![0u8; 4096];
        let n = f.read(&mut buf).expect("read");
        let want = &big[off as usize..(off as usize + 4096).min(big.len())];
        assert_eq!(&buf[..n], &want[..n], "at {off}");
        assert!(n > 0);
    }
    drop(f);
    // --read-only refuses writes
    let e = std::fs::write(dir.join("new.txt"), b"no").expect_err("a read-only mount");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");

    // an open file reads the version it opened, to its end; the next open reads the new one
    let mut open = std::fs::File::open(dir.join("open.txt")).expect("open");
    let mut head = [0u8; 10];
    open.read_exact(&mut head).expect("head");
    rt().block_on(async {
        store
            .put(
                &StorePath::from("data/open.txt"),
                PutPayload::from(b"the new version".to_vec()),
            )
            .await
            .expect("overwrite")
    });
    // a second open meanwhile reads the new version whole, and the first reads on in its
    // own: the two versions do not mix in the kernel's page cache of the file
    time_until("the overwrite to show at a second open", 10, || {
        std::fs::read(dir.join("open.txt")).ok().as_deref() == Some(&b"the new version"[..])
    });
    let mut rest = Vec::new();
    open.read_to_end(&mut rest).expect("rest");
    let mut whole = head.to_vec();
    whole.extend_from_slice(&rest);
    assert_eq!(whole, files["open.txt"], "the open file mixed versions");
    drop(open);
    let took = time_until("the overwrite to show at the next open", 10, || {
        std::fs::read(dir.join("open.txt")).ok().as_deref() == Some(&b"the new version"[..])
    });
    assert!(
        took < Duration::from_secs(2),
        "the overwrite showed after {took:?}"
    );

    // a PUT and a DELETE made elsewhere show within 2 s, though folders are kept an hour
    assert!(!dir.join("sub/new.bin").exists());
    let new = bytes(4, 70_000);
    let start = Instant::now();
    rt().block_on(async {
        store
            .put(
                &StorePath::from("data/sub/new.bin"),
                PutPayload::from(new.clone()),
            )
            .await
            .expect("put")
    });
    wait_for("the PUT to show in the mount", 10, || {
        names(&dir.join("sub")).contains(&"new.bin".to_string())
    });
    let shown = start.elapsed();
    assert_eq!(std::fs::read(dir.join("sub/new.bin")).expect("read"), new);
    let start = Instant::now();
    rt().block_on(async {
        store
            .delete(&StorePath::from("data/sub/mid.bin"))
            .await
            .expect("delete")
    });
    wait_for("the DELETE to show in the mount", 10, || {
        !dir.join("sub/mid.bin").exists()
            && !names(&dir.join("sub")).contains(&"mid.bin".to_string())
    });
    let gone = start.elapsed();
    assert!(
        shown < Duration::from_secs(2) && gone < Duration::from_secs(2),
        "a PUT showed after {shown:?}, a DELETE after {gone:?}: {}",
        log_tail(&m.log_text())
    );
    eprintln!("coherence through SQS: a PUT showed after {shown:?}, a DELETE after {gone:?}");
    // a new folder shows in its parent
    rt().block_on(async {
        store
            .put(
                &StorePath::from("data/fresh/x.txt"),
                PutPayload::from_static(b"x"),
            )
            .await
            .expect("put")
    });
    wait_for("a new folder to show", 10, || {
        names(&dir).contains(&"fresh".to_string())
    });

    // SIGTERM unmounts and exits 0
    assert_eq!(m.stop(), Some(0), "{}", log_tail(&m.log_text()));
    assert!(!mounted(&dir), "still mounted after SIGTERM");
    assert!(
        m.log_text().contains("unmounted"),
        "{}",
        log_tail(&m.log_text())
    );
}

#[test]
fn a_local_folder_mounts_and_fusermount_unmounts_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("src");
    let files: BTreeMap<String, Vec<u8>> = [
        ("a/b/c.bin".to_string(), bytes(5, 1_000_003)),
        ("top.txt".to_string(), b"top".to_vec()),
    ]
    .into();
    seed_local(&root, &files);
    let dir = tmp.path().join("mnt");
    let log = tmp.path().join("mount.log");
    let mut m = Mounted::start(
        root.to_str().expect("utf-8"),
        &dir,
        &log,
        &["--dir-cache-time", "1h"],
    );
    for (k, v) in &files {
        assert_eq!(&std::fs::read(dir.join(k)).expect("read"), v, "{k}");
    }
    assert_eq!(names(&dir.join("a")), ["b"]);
    // changes made in the folder itself show by inotify, within the hour's folder cache
    std::fs::write(root.join("a/new.txt"), b"new").expect("write");
    let took = time_until("a file made in the folder shows in the mount", 2, || {
        names(&dir.join("a")) == ["b", "new.txt"]
    });
    assert_eq!(std::fs::read(dir.join("a/new.txt")).expect("read"), b"new");
    std::fs::write(root.join("top.txt"), b"changed, longer").expect("overwrite");
    wait_for("an overwrite shows", 2, || {
        std::fs::read(dir.join("top.txt")).ok().as_deref() == Some(&b"changed, longer"[..])
    });
    std::fs::remove_file(root.join("a/new.txt")).expect("rm");
    wait_for("a delete shows", 2, || names(&dir.join("a")) == ["b"]);
    eprintln!("inotify: a new file showed in {took:?}");
    // a mount point that is not a folder is named
    let out = run({
        let mut c = slate();
        c.args(["mount", root.to_str().expect("utf-8")])
            .arg(root.join("top.txt"));
        c
    });
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("top.txt is not a folder"),
        "{}",
        stderr(&out)
    );
    // unmounted from outside: the process ends on its own, exit 0
    let st = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(&dir)
        .status()
        .expect("fusermount3");
    assert!(st.success());
    let mut child = m.child.take().expect("child");
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break s.code();
        }
        assert!(
            Instant::now() < deadline,
            "the mount did not end after fusermount3 -u"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(0), "{}", log_tail(&m.log_text()));
    assert!(!mounted(&dir));
    assert_eq!(m.stop(), None);
}

/// What the store holds at `key`: bytes, Content-Type, and the `mtime` metadata rclone reads.
fn at_store(
    store: &std::sync::Arc<dyn object_store::ObjectStore>,
    key: &str,
) -> Option<(Vec<u8>, Option<String>, Option<String>)> {
    rt().block_on(async {
        let got = match store.get(&StorePath::from(key)).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return None,
            Err(e) => panic!("{key}: {e}"),
        };
        let attrs = got.attributes.clone();
        let bytes = got.bytes().await.expect("bytes").to_vec();
        let ct = attrs
            .get(&object_store::Attribute::ContentType)
            .map(|v| v.as_ref().to_string());
        let mtime = attrs
            .get(&object_store::Attribute::Metadata("mtime".into()))
            .map(|v| v.as_ref().to_string());
        Some((bytes, ct, mtime))
    })
}

#[test]
fn writes_through_the_mount_are_at_the_store_when_close_returns() {
    let bucket = format!("slate-mntw-{}", std::process::id());
    let (st, body) = s3_raw("PUT", &format!("/{bucket}"), "");
    assert!(
        st == 200 || body.contains("BucketAlreadyOwnedByYou"),
        "{body}"
    );
    let store = s3(&bucket);
    rt().block_on(seed(
        &store,
        "w",
        &[("old.txt".to_string(), b"0123456789".to_vec())].into(),
    ));
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("mnt");
    let log = tmp.path().join("mount.log");
    let cache = tmp.path().join("cache");
    let mut m = Mounted::start(
        &format!("s3://{bucket}/w"),
        &dir,
        &log,
        &["--cache-dir", cache.to_str().expect("utf-8")],
    );

    // without events, an object grown elsewhere reads whole at its next open: the size the
    // kernel keeps for the TTL is not the end of the file
    assert_eq!(
        std::fs::read(dir.join("old.txt")).expect("read"),
        b"0123456789"
    );
    let grown = bytes(9, 30_000);
    rt().block_on(async {
        store
            .put(
                &StorePath::from("w/old.txt"),
                PutPayload::from(grown.clone()),
            )
            .await
            .expect("overwrite")
    });
    let got = std::fs::read(dir.join("old.txt")).expect("read");
    assert!(
        got == grown,
        "read {} bytes of the grown object's {}",
        got.len(),
        grown.len()
    );
    rt().block_on(async {
        store
            .put(
                &StorePath::from("w/old.txt"),
                PutPayload::from_static(b"0123456789"),
            )
            .await
            .expect("put back")
    });
    assert_eq!(
        std::fs::read(dir.join("old.txt")).expect("read"),
        b"0123456789"
    );

    // a new file: its bytes, its Content-Type from its extension, its time as rclone keeps it
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    std::fs::write(dir.join("doc.json"), b"{\"a\": 1}").expect("write");
    let (b, ct, mtime) = at_store(&store, "w/doc.json").expect("at the store when close returned");
    assert_eq!(b, b"{\"a\": 1}");
    assert_eq!(ct.as_deref(), Some("application/json"));
    let secs: f64 = mtime
        .as_deref()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("an rclone mtime: {mtime:?}"));
    assert!(secs as u64 >= before.saturating_sub(1), "{secs} < {before}");

    // a large file, written sequentially: a multipart upload, every byte
    let big = bytes(6, 20 * 1024 * 1024 + 11);
    let src = tmp.path().join("big.bin");
    std::fs::write(&src, &big).expect("local");
    std::fs::copy(&src, dir.join("big.bin")).expect("cp");
    let (b, ct, _) = at_store(&store, "w/big.bin").expect("big at the store");
    assert!(
        b == big,
        "{} bytes at the store, {} written",
        b.len(),
        big.len()
    );
    assert_eq!(ct.as_deref(), Some("application/octet-stream"));

    // parts go while the file is written: two parts at the store before it is closed
    {
        use std::io::Write;
        let mut f = std::fs::File::create(dir.join("stream.bin")).expect("create");
        let data = bytes(9, 19 * 1024 * 1024 + 7);
        f.write_all(&data[..17 * 1024 * 1024]).expect("write");
        let mut upload = String::new();
        wait_for(
            "two parts uploaded while the file is still open",
            30,
            || {
                let (_, list) = s3_raw("GET", &format!("/{bucket}?uploads"), "");
                let Some(id) = list
                    .split("<Upload>")
                    .filter(|u| u.contains("<Key>w/stream.bin</Key>"))
                    .find_map(|u| u.split("<UploadId>").nth(1)?.split("</UploadId>").next())
                else {
                    return false;
                };
                upload = id.to_string();
                let (_, parts) =
                    s3_raw("GET", &format!("/{bucket}/w/stream.bin?uploadId={id}"), "");
                parts.matches("<Part>").count() >= 2
            },
        );
        // a process forked while the file is open closes its inherited copy at its exec:
        // that close is not the writer's, and uploads nothing
        let forked = std::process::Command::new("true").status().expect("true");
        assert!(forked.success());
        assert!(
            at_store(&store, "w/stream.bin").is_none(),
            "not complete before close (nor at a forked child's close of its copy)"
        );
        f.write_all(&data[17 * 1024 * 1024..]).expect("write");
        drop(f);
        let (b, ct, _) = at_store(&store, "w/stream.bin").expect("complete at close");
        assert!(b == data, "{} bytes at the store", b.len());
        assert_eq!(ct.as_deref(), Some("application/octet-stream"));
        let (_, list) = s3_raw("GET", &format!("/{bucket}?uploads"), "");
        assert!(!list.contains(&upload), "the upload was completed: {list}");
    }
    // a rewrite below what was streamed: the stream is dropped, the file uploaded whole
    {
        use std::io::{Seek, Write};
        let mut f = std::fs::File::create(dir.join("rewrite.bin")).expect("create");
        let mut data = bytes(10, 17 * 1024 * 1024 + 1);
        f.write_all(&data).expect("write");
        f.seek(SeekFrom::Start(3)).expect("seek");
        f.write_all(b"XYZ").expect("rewrite");
        data[3..6].copy_from_slice(b"XYZ");
        drop(f);
        let (b, _, _) = at_store(&store, "w/rewrite.bin").expect("at the store");
        assert!(b == data, "the rewrite is at the store");
        let (_, list) = s3_raw("GET", &format!("/{bucket}?uploads"), "");
        assert!(
            !list.contains("w/rewrite.bin"),
            "the broken stream was aborted: {list}"
        );
    }

    // an overwrite, shorter; an append; a truncate
    std::fs::write(dir.join("old.txt"), b"new").expect("overwrite");
    assert_eq!(at_store(&store, "w/old.txt").expect("old").0, b"new");
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("old.txt"))
            .expect("append");
        f.write_all(b"+more").expect("append");
    }
    assert_eq!(at_store(&store, "w/old.txt").expect("old").0, b"new+more");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("old.txt"))
        .expect("open");
    f.set_len(2).expect("ftruncate");
    drop(f);
    assert_eq!(at_store(&store, "w/old.txt").expect("old").0, b"ne");
    assert_eq!(std::fs::read(dir.join("old.txt")).expect("read"), b"ne");

    // rename: the new key, the old one gone
    std::fs::rename(dir.join("old.txt"), dir.join("renamed.txt")).expect("rename");
    assert_eq!(at_store(&store, "w/renamed.txt").expect("renamed").0, b"ne");
    assert!(at_store(&store, "w/old.txt").is_none());
    assert!(!dir.join("old.txt").exists());

    // folders: made, filled, not removable while full, removable empty
    std::fs::create_dir(dir.join("d")).expect("mkdir");
    assert!(dir.join("d").is_dir());
    let e = std::fs::create_dir(dir.join("d")).expect_err("exists");
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    std::fs::write(dir.join("d/in.txt"), b"in").expect("write in d");
    assert_eq!(at_store(&store, "w/d/in.txt").expect("in").0, b"in");
    let e = std::fs::remove_dir(dir.join("d")).expect_err("not empty");
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY));
    std::fs::create_dir(dir.join("empty")).expect("mkdir");
    std::fs::remove_dir(dir.join("empty")).expect("rmdir");
    assert!(!dir.join("empty").exists());
    // a folder renamed: key by key
    std::fs::rename(dir.join("d"), dir.join("d2")).expect("rename folder");
    assert_eq!(at_store(&store, "w/d2/in.txt").expect("moved").0, b"in");
    assert!(at_store(&store, "w/d/in.txt").is_none());

    // unlink
    std::fs::remove_file(dir.join("doc.json")).expect("rm");
    assert!(at_store(&store, "w/doc.json").is_none());
    assert!(!dir.join("doc.json").exists());

    // what an object store cannot hold is refused with ENOTSUP
    let e = std::os::unix::fs::symlink("renamed.txt", dir.join("ln")).expect_err("symlink");
    assert_eq!(e.raw_os_error(), Some(libc::ENOTSUP));
    let e = std::fs::hard_link(dir.join("renamed.txt"), dir.join("hard")).expect_err("link");
    assert_eq!(e.raw_os_error(), Some(libc::ENOTSUP));

    // no file's bytes are left in the cache folder once the files are closed (the state and
    // the block cache stay)
    let left: Vec<_> = std::fs::read_dir(&cache)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .filter(|n: &std::ffi::OsString| {
            let n = n.to_string_lossy();
            !(n.starts_with("state.db") || n == "blocks" || n == "locks")
        })
        .collect();
    assert!(left.is_empty(), "cache files left: {left:?}");
    assert_eq!(m.stop(), Some(0), "{}", log_tail(&m.log_text()));
    // a mount that ended leaves no lock of its own
    let locks: Vec<_> = std::fs::read_dir(cache.join("locks"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(locks.is_empty(), "locks left: {locks:?}");
}

/// Azure: a blob written to Azurite and the event Event Grid would deliver (Azurite has no
/// Event Grid) put on a real Azurite queue: the mount shows it within 2 s of the event.
#[test]
fn an_azure_container_mount_follows_its_storage_queue() {
    let container = "slate-src";
    let prefix = unique("mnt");
    let queue = unique("slate-mq").to_ascii_lowercase();
    let spec = format!("azqueue://devstoreaccount1/{queue}");
    // SAFETY of env: the test's own process reads these to reach Azurite's queue; every test
    // sets the same values.
    unsafe {
        std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
        std::env::set_var("AZURITE_QUEUE_STORAGE_URL", azurite_queue_url());
    }
    let q = slate::events::azqueue::AzQueueSource::open(&spec).expect("queue");
    rt().block_on(q.create()).expect("create queue");
    let store = az(container);
    let files: BTreeMap<String, Vec<u8>> = [
        ("a.bin".to_string(), bytes(7, 9 * 1024 * 1024 + 5)),
        ("d/b.txt".to_string(), b"b".to_vec()),
    ]
    .into();
    rt().block_on(seed(&store, &prefix, &files));
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("mnt");
    let mut m = Mounted::start(
        &format!("az://{container}/{prefix}"),
        &dir,
        &tmp.path().join("mount.log"),
        &[
            "--events",
            &spec,
            "--dir-cache-time",
            "1h",
            "--storage-class",
            "cool",
        ],
    );
    for (k, v) in &files {
        assert!(std::fs::read(dir.join(k)).expect("read") == *v, "{k}");
    }
    let event = |key: &str, kind: &str, size: usize, seq: u64| {
        let ev = blob_event(
            container,
            &format!("{prefix}/{key}"),
            kind,
            size,
            seq,
            seq % 2 == 0,
        );
        rt().block_on(q.send(&b64(&ev))).expect("send");
    };
    // a new blob, its event: shown within 2 s of the event
    rt().block_on(async {
        store
            .put(
                &StorePath::from(format!("{prefix}/d/new.txt")),
                PutPayload::from_static(b"new"),
            )
            .await
            .expect("put")
    });
    assert!(!names(&dir.join("d")).contains(&"new.txt".to_string()));
    event("d/new.txt", "BlobCreated", 3, 1);
    let shown = time_until("the new blob in the mount", 10, || {
        names(&dir.join("d")).contains(&"new.txt".to_string())
    });
    assert_eq!(std::fs::read(dir.join("d/new.txt")).expect("read"), b"new");
    // a delete
    rt().block_on(async {
        store
            .delete(&StorePath::from(format!("{prefix}/d/b.txt")))
            .await
            .expect("delete")
    });
    event("d/b.txt", "BlobDeleted", 0, 2);
    let gone = time_until("the deleted blob gone from the mount", 10, || {
        !dir.join("d/b.txt").exists()
    });
    assert!(
        shown < Duration::from_secs(2) && gone < Duration::from_secs(2),
        "a create showed {shown:?}, a delete {gone:?} after its event"
    );
    eprintln!("coherence through an Azurite queue: a create showed {shown:?}, a delete {gone:?} after its event");
    // written through the mount: at Azurite when close returns, with its Content-Type
    std::fs::write(dir.join("w.html"), b"<p>").expect("write");
    let got = rt().block_on(async {
        store
            .get(&StorePath::from(format!("{prefix}/w.html")))
            .await
    });
    let got = got.expect("at Azurite");
    let ct = got
        .attributes
        .get(&object_store::Attribute::ContentType)
        .map(|v| v.as_ref().to_string())
        .unwrap_or_default();
    assert!(ct.starts_with("text/html"), "{ct}");
    let tier = |key: &str| {
        let (status, h) = az_head(container, &format!("{prefix}/{key}"));
        assert_eq!(status, 200, "HEAD {key}: {h:?}");
        h.get("x-ms-access-tier").cloned().unwrap_or_default()
    };
    assert_eq!(tier("w.html"), "Cool");
    // renamed, it keeps its tier, Content-Type and modification time: Azure's copy cannot
    // ask for a tier, so the bytes move through the mount (a multipart upload past 8 MiB)
    let big = bytes(9, 9 * 1024 * 1024 + 77);
    std::fs::write(dir.join("big.bin"), &big).expect("write big");
    let mtime = |p: &Path| {
        std::fs::metadata(p)
            .expect("stat")
            .modified()
            .expect("mtime")
    };
    let (w_time, big_time) = (mtime(&dir.join("w.html")), mtime(&dir.join("big.bin")));
    std::fs::rename(dir.join("w.html"), dir.join("d/moved.html")).expect("rename");
    std::fs::rename(dir.join("big.bin"), dir.join("d/big-moved.bin")).expect("rename big");
    assert_eq!(tier("d/moved.html"), "Cool");
    assert_eq!(tier("d/big-moved.bin"), "Cool");
    // a blob written by another client, in the account's default tier, takes the mount's
    // when renamed through it (as S3's renames do): Azurite's copy would keep the source's
    assert_ne!(tier("a.bin"), "Cool");
    std::fs::rename(dir.join("a.bin"), dir.join("d/a-moved.bin")).expect("rename a.bin");
    assert_eq!(tier("d/a-moved.bin"), "Cool");
    assert_eq!(
        std::fs::read(dir.join("d/a-moved.bin")).expect("read a-moved.bin"),
        files["a.bin"]
    );
    let at = |key: &str| {
        rt().block_on(async {
            let got = store
                .get(&StorePath::from(format!("{prefix}/{key}")))
                .await?;
            let attrs = got.attributes.clone();
            Ok::<_, object_store::Error>((got.bytes().await?.to_vec(), attrs))
        })
    };
    let (b, attrs) = at("d/moved.html").expect("the renamed blob");
    assert_eq!(b, b"<p>");
    let meta =
        slate::core::meta::Meta::from_attributes(slate::core::location::Scheme::Azure, &attrs);
    assert!(
        meta.content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("text/html")),
        "{meta:?}"
    );
    assert_eq!(
        meta.mtime,
        Some(w_time),
        "the renamed blob's modification time"
    );
    let (b, attrs) = at("d/big-moved.bin").expect("the renamed large blob");
    assert!(b == big, "the renamed large blob's bytes");
    let meta =
        slate::core::meta::Meta::from_attributes(slate::core::location::Scheme::Azure, &attrs);
    assert_eq!(
        meta.mtime,
        Some(big_time),
        "the renamed large blob's modification time"
    );
    assert!(matches!(
        at("w.html"),
        Err(object_store::Error::NotFound { .. })
    ));
    assert!(matches!(
        at("big.bin"),
        Err(object_store::Error::NotFound { .. })
    ));
    assert_eq!(
        std::fs::read(dir.join("d/big-moved.bin")).expect("read the renamed file"),
        big
    );
    assert_eq!(m.stop(), Some(0));
}

/// GCS: fake-gcs-server publishes each change to the Pub/Sub emulator; the mount pulls its
/// own subscription and shows the change within 2 s of the write.
#[test]
fn a_gcs_bucket_mount_follows_its_pubsub_subscription() {
    let sub = Subscription::new("slate-mnt", None);
    let prefix = unique("mnt");
    let write = gcs_writer("slate-src");
    let files: BTreeMap<String, Vec<u8>> = [
        ("a.bin".to_string(), bytes(8, 3 * 1024 * 1024 + 1)),
        ("d/b.txt".to_string(), b"b".to_vec()),
    ]
    .into();
    rt().block_on(seed(&write, &prefix, &files));
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("mnt");
    let spec = format!("pubsub://projects/test-project/subscriptions/{}", sub.0);
    let mut m = Mounted::start(
        &format!("gs://slate-src/{prefix}"),
        &dir,
        &tmp.path().join("mount.log"),
        &["--events", &spec, "--dir-cache-time", "1h", "--read-only"],
    );
    for (k, v) in &files {
        assert!(std::fs::read(dir.join(k)).expect("read") == *v, "{k}");
    }
    let start = Instant::now();
    rt().block_on(async {
        write
            .put(
                &StorePath::from(format!("{prefix}/d/new.txt")),
                PutPayload::from_static(b"new"),
            )
            .await
            .expect("put")
    });
    wait_for("the new object in the mount", 10, || {
        names(&dir.join("d")).contains(&"new.txt".to_string())
    });
    let shown = start.elapsed();
    let start = Instant::now();
    rt().block_on(async {
        write
            .delete(&StorePath::from(format!("{prefix}/d/b.txt")))
            .await
            .expect("delete")
    });
    wait_for("the deleted object gone from the mount", 10, || {
        !dir.join("d/b.txt").exists()
    });
    let gone = start.elapsed();
    assert!(
        shown < Duration::from_secs(2) && gone < Duration::from_secs(2),
        "a create showed {shown:?}, a delete {gone:?} after the write"
    );
    eprintln!(
        "coherence through Pub/Sub: a create showed {shown:?}, a delete {gone:?} after the write"
    );
    assert_eq!(m.stop(), Some(0));

    // written and renamed through a mount asking for a class: GCS's copy cannot ask for
    // one, so a rename moves the bytes through the mount with it
    let dir2 = tmp.path().join("mnt2");
    let mut w = Mounted::start(
        &format!("gs://slate-src/{prefix}"),
        &dir2,
        &tmp.path().join("mount2.log"),
        &["--storage-class", "nearline"],
    );
    let object = |key: &str| -> serde_json::Value {
        let url = format!(
            "{}/storage/v1/b/slate-src/o/{}",
            gcs_endpoint(),
            url::form_urlencoded::byte_serialize(format!("{prefix}/{key}").as_bytes())
                .collect::<String>()
        );
        let r = reqwest::blocking::get(url).expect("gcs get");
        assert!(r.status().is_success(), "GET {key}: {}", r.status());
        r.json().expect("json")
    };
    std::fs::write(dir2.join("w.html"), b"<p>").expect("write");
    let before = object("w.html");
    assert_eq!(before["storageClass"], "NEARLINE", "{before}");
    assert_ne!(object("a.bin")["storageClass"], "NEARLINE");
    std::fs::rename(dir2.join("w.html"), dir2.join("d/moved.html")).expect("rename");
    std::fs::rename(dir2.join("a.bin"), dir2.join("d/a-moved.bin")).expect("rename a.bin");
    let after = object("d/moved.html");
    assert_eq!(after["storageClass"], "NEARLINE", "{after}");
    assert!(
        after["contentType"]
            .as_str()
            .is_some_and(|c| c.starts_with("text/html")),
        "{after}"
    );
    assert!(before["metadata"]["mtime"].is_string(), "{before}");
    assert_eq!(
        after["metadata"]["mtime"], before["metadata"]["mtime"],
        "the renamed object's modification time"
    );
    let moved = object("d/a-moved.bin");
    assert_eq!(moved["storageClass"], "NEARLINE", "{moved}");
    assert_eq!(
        std::fs::read(dir2.join("d/a-moved.bin")).expect("read the renamed file"),
        files["a.bin"]
    );
    assert!(!dir2.join("a.bin").exists() && !dir2.join("w.html").exists());
    assert_eq!(w.stop(), Some(0));
}

/// `slate mount-status --cache-dir DIR`'s output.
fn mount_status(cache: &Path) -> String {
    let out = slate()
        .args(["mount-status", "--cache-dir"])
        .arg(cache)
        .output()
        .expect("slate mount-status");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn write_back_closes_at_once_and_what_a_killed_mount_did_not_upload_the_next_mount_does() {
    let bucket = format!("slate-mntwb-{}", std::process::id());
    let (st, body) = s3_raw("PUT", &format!("/{bucket}"), "");
    assert!(
        st == 200 || body.contains("BucketAlreadyOwnedByYou"),
        "{body}"
    );
    let store = s3(&bucket);
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("mnt");
    let cache = tmp.path().join("cache");
    let src = format!("s3://{bucket}/wb");
    let cache_arg = cache.to_str().expect("utf-8");
    let mut m = Mounted::start(
        &src,
        &dir,
        &tmp.path().join("mount1.log"),
        &["--cache-dir", cache_arg, "--write-back", "1h"],
    );
    // under a part (8 MiB): nothing streams while it is written, the upload waits the hour
    let big = bytes(3, 5 * 1024 * 1024 + 5);
    std::fs::create_dir(dir.join("data")).expect("mkdir");
    std::fs::write(dir.join("data/x.bin"), &big).expect("write");
    std::fs::write(dir.join("notes.txt"), b"first").expect("write");
    std::fs::write(dir.join("notes.txt"), b"second, longer").expect("write again");
    // close returned: nothing is at the store yet, the mount shows the new bytes
    assert!(
        at_store(&store, "wb/data/x.bin").is_none(),
        "uploaded at close"
    );
    assert!(at_store(&store, "wb/notes.txt").is_none());
    assert!(std::fs::read(dir.join("data/x.bin")).expect("read") == big);
    assert_eq!(
        std::fs::metadata(dir.join("notes.txt"))
            .expect("stat")
            .len(),
        14
    );
    assert_eq!(names(&dir), ["data", "notes.txt"]);
    let status = mount_status(&cache);
    assert!(status.contains("2 file(s) waiting"), "{status}");
    assert!(status.contains("wb/data/x.bin"), "{status}");
    // a file written and deleted before its upload is never uploaded
    std::fs::write(dir.join("gone.txt"), b"x").expect("write");
    std::fs::remove_file(dir.join("gone.txt")).expect("unlink");
    assert!(mount_status(&cache).contains("2 file(s) waiting"));
    // a file whose kept bytes go missing before its upload (removed by hand below)
    std::fs::write(dir.join("lost.txt"), b"lost").expect("write");
    let status = mount_status(&cache);
    assert!(status.contains("3 file(s) waiting"), "{status}");
    let kept = status
        .lines()
        .find(|l| l.contains("/wb/lost.txt "))
        .and_then(|l| l.split("kept in ").nth(1))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("where lost.txt is kept: {status}"));
    assert!(kept.is_file(), "{}", kept.display());

    // kill -9: nothing uploaded, the state keeps both
    let mut child = m.child.take().expect("the mount");
    let pid = child.id() as i32;
    // SAFETY: kill(2) of this test's own child
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let status = child.wait().expect("wait");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "the kill landed while the mount ran"
    );
    drop(m);
    assert!(!mounted(&dir));
    assert!(at_store(&store, "wb/data/x.bin").is_none());
    std::fs::remove_file(&kept).expect("remove lost.txt's kept bytes");

    // the next mount of the same source uploads them first
    let log2 = tmp.path().join("mount2.log");
    let mut m2 = Mounted::start(&src, &dir, &log2, &["--cache-dir", cache_arg]);
    wait_for("the killed mount's files at the store", 30, || {
        at_store(&store, "wb/notes.txt").is_some() && at_store(&store, "wb/data/x.bin").is_some()
    });
    let (b, ct, mtime) = at_store(&store, "wb/notes.txt").expect("notes");
    assert_eq!(b, b"second, longer", "the last close's bytes");
    assert!(
        ct.as_deref().is_some_and(|c| c.starts_with("text/plain")),
        "{ct:?}"
    );
    assert!(mtime.is_some(), "rclone's mtime");
    assert!(at_store(&store, "wb/data/x.bin").expect("x").0 == big);
    assert!(at_store(&store, "wb/gone.txt").is_none());
    wait_for("the state emptied", 10, || {
        mount_status(&cache).contains("0 file(s) waiting")
    });
    // what lost its bytes is not uploaded, and is listed (and logged) as lost
    assert!(at_store(&store, "wb/lost.txt").is_none());
    let status = mount_status(&cache);
    assert!(
        status.contains("1 file(s) lost before their upload"),
        "{status}"
    );
    assert!(
        status.lines().any(|l| l.starts_with("lost ")
            && l.contains(&format!("{src}/lost.txt  4 bytes"))
            && l.contains(&kept.display().to_string())),
        "{status}"
    );
    assert!(
        m2.log_text().contains("lost its bytes before its upload"),
        "{}",
        m2.log_text()
    );
    assert!(
        m2.log_text().contains("did not upload"),
        "{}",
        m2.log_text()
    );
    assert_eq!(m2.stop(), Some(0));

    // a clean stop uploads what waits before the process ends
    let mut m3 = Mounted::start(
        &src,
        &dir,
        &tmp.path().join("mount3.log"),
        &["--cache-dir", cache_arg, "--write-back", "1h"],
    );
    std::fs::write(dir.join("late.txt"), b"late").expect("write");
    assert!(at_store(&store, "wb/late.txt").is_none());
    assert_eq!(m3.stop(), Some(0));
    assert_eq!(at_store(&store, "wb/late.txt").expect("late").0, b"late");
    // and a short delay uploads by itself
    let mut m4 = Mounted::start(
        &src,
        &dir,
        &tmp.path().join("mount4.log"),
        &[
            "--cache-dir",
            cache_arg,
            "--write-back",
            "1s",
            "--storage-class",
            "standard-ia",
            "--acl",
            "public-read",
        ],
    );
    std::fs::write(dir.join("soon.txt"), b"soon").expect("write");
    // a large file streams its parts while written: its close only completes the upload
    let large = bytes(8, 20 * 1024 * 1024 + 3);
    std::fs::write(dir.join("large.bin"), &large).expect("write large");
    wait_for("a 1 s write-back uploaded", 20, || {
        at_store(&store, "wb/soon.txt").is_some()
    });
    wait_for("the streamed file complete", 30, || {
        at_store(&store, "wb/large.bin").is_some_and(|(b, _, _)| b == large)
    });
    // written with the storage class and canned ACL asked for, as the copier writes
    let (st, h, _) = s3_signed("HEAD", &format!("/{bucket}/wb/soon.txt"), &[], "");
    assert_eq!(st, 200);
    assert!(
        h.iter()
            .any(|(k, v)| k == "x-amz-storage-class" && v == "STANDARD_IA"),
        "{h:?}"
    );
    let (st, _, acl) = s3_signed("GET", &format!("/{bucket}/wb/soon.txt?acl"), &[], "");
    assert_eq!(st, 200, "{acl}");
    assert!(
        acl.contains("http://acs.amazonaws.com/groups/global/AllUsers"),
        "public-read: {acl}"
    );
    // a renamed file keeps them: the rename's server-side copy asks for them again
    std::fs::rename(dir.join("soon.txt"), dir.join("moved.txt")).expect("rename");
    let (st, h, _) = s3_signed("HEAD", &format!("/{bucket}/wb/moved.txt"), &[], "");
    assert_eq!(st, 200);
    assert!(
        h.iter()
            .any(|(k, v)| k == "x-amz-storage-class" && v == "STANDARD_IA"),
        "the renamed key's class: {h:?}"
    );
    let (st, _, acl) = s3_signed("GET", &format!("/{bucket}/wb/moved.txt?acl"), &[], "");
    assert_eq!(st, 200, "{acl}");
    assert!(
        acl.contains("http://acs.amazonaws.com/groups/global/AllUsers"),
        "the renamed key's ACL: {acl}"
    );
    assert!(at_store(&store, "wb/soon.txt").is_none());
    assert_eq!(m4.stop(), Some(0));
}

/// The most memory the process `pid` held (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM")
        * 1024
}

/// The mount's meter `name` from its /metrics.
fn meter(addr: &str, name: &str) -> u64 {
    let body = reqwest::blocking::get(format!("http://{addr}/metrics"))
        .and_then(|r| r.text())
        .expect("GET /metrics");
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in {body}"))
}

#[test]
fn the_block_cache_stays_under_its_limit_and_memory_under_its_budget() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).expect("src");
    // 64 files of 3 MiB and a bit: 3x a 64 MiB cache
    let files: Vec<(String, Vec<u8>)> = (0..64)
        .map(|i| {
            (
                format!("f{i:02}.bin"),
                bytes(i as u64, 3 * 1024 * 1024 + 17 * i),
            )
        })
        .collect();
    for (n, b) in &files {
        std::fs::write(src.join(n), b).expect("seed");
    }

    let dir = tmp.path().join("mnt");
    let cache = tmp.path().join("cache");
    let mut m = Mounted::start(
        src.to_str().expect("utf-8"),
        &dir,
        &tmp.path().join("mount.log"),
        &[
            "--cache-dir",
            cache.to_str().expect("utf-8"),
            "--cache-max-size",
            "64MiB",
            "--memory-limit",
            "16MiB",
            "--listen",
            "127.0.0.1:0",
        ],
    );
    let log = m.log_text();
    let addr = log
        .split("http://")
        .nth(1)
        .and_then(|r| r.split("/metrics").next())
        .unwrap_or_else(|| panic!("the metrics address in the log: {log}"))
        .to_string();
    let pid = m.child.as_ref().expect("mount").id();
    let base = peak_rss(pid);
    // 64 files open and read at once
    let handles: Vec<_> = files
        .iter()
        .map(|(n, b)| {
            let (p, want) = (dir.join(n), b.clone());
            std::thread::spawn(move || {
                let mut f = std::fs::File::open(&p).expect("open");
                let mut got = Vec::new();
                f.read_to_end(&mut got).expect("read");
                got == want
            })
        })
        .collect();
    for (h, (n, _)) in handles.into_iter().zip(&files) {
        assert!(h.join().expect("reader"), "{n}: every byte");
    }
    let grew = peak_rss(pid).saturating_sub(base);
    eprintln!("peak RSS grew by {} MiB", grew >> 20);
    let total: u64 = files.iter().map(|(_, b)| b.len() as u64).sum();
    let fetched = meter(&addr, "slate_mount_fetched_bytes_total");
    // blocks fetched ahead are not evicted before their reader gets to them
    assert!(
        fetched < total + total / 10,
        "{fetched} bytes fetched to read {total}"
    );
    // the budget (16 MiB of GETs in flight, each streaming into the cache) and the kernel's
    // reads in flight (5 MiB measured), not the 64 files' read-ahead windows
    assert!(
        grew < 40 * 1024 * 1024,
        "peak RSS grew by {} MiB reading 64 files at once",
        grew >> 20
    );
    let limit = 64 * 1024 * 1024;
    let held = meter(&addr, "slate_mount_cache_bytes");
    assert!(held <= limit, "the cache holds {held} bytes");
    assert!(meter(&addr, "slate_mount_cache_evicted_bytes_total") > 0);
    // the mount's own folder: blocks/PID-N (a process can hold several mounts)
    let mine = std::fs::read_dir(cache.join("blocks"))
        .expect("the cache's folder")
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{pid}-"))
        })
        .expect("the mount's folder of blocks")
        .path();
    let on_disk: u64 = std::fs::read_dir(&mine)
        .expect("the mount's folder of blocks")
        .map(|e| {
            std::os::unix::fs::MetadataExt::blocks(&e.expect("entry").metadata().expect("meta"))
                * 512
        })
        .sum();
    assert!(
        on_disk <= limit + 4 * 1024 * 1024,
        "{on_disk} bytes on disk"
    );
    // a file read alone, then again: the second time from the cache, nothing fetched
    let (n, b) = &files[5];
    assert!(std::fs::read(dir.join(n)).expect("alone") == *b);
    let fetched = meter(&addr, "slate_mount_fetched_bytes_total");
    assert!(std::fs::read(dir.join(n)).expect("again") == *b);
    assert_eq!(meter(&addr, "slate_mount_fetched_bytes_total"), fetched);
    assert!(meter(&addr, "slate_mount_cache_hits_total") > 0);
    // random reads touch only their blocks: a 4 KiB read fetches at most a 128 KiB block
    let (n, b) = &files[0];
    let mut f = std::fs::File::open(dir.join(n)).expect("open");
    let before = meter(&addr, "slate_mount_fetched_bytes_total");
    let mut buf = [0u8; 4096];
    f.seek(SeekFrom::Start(2 * 1024 * 1024 + 5)).expect("seek");
    f.read_exact(&mut buf).expect("read");
    assert_eq!(
        &buf[..],
        &b[2 * 1024 * 1024 + 5..2 * 1024 * 1024 + 5 + 4096]
    );
    let got = meter(&addr, "slate_mount_fetched_bytes_total") - before;
    assert!(got <= 2 * 128 * 1024, "a 4 KiB read fetched {got} bytes");
    drop(f);
    assert_eq!(m.stop(), Some(0));
    assert!(
        !std::fs::read_dir(cache.join("blocks"))
            .expect("the cache's folder")
            .flatten()
            .any(|e| e.path() == mine),
        "the cache's folder goes with its mount"
    );
}

/// Detaches `dirs` when dropped (a failing test leaves no mount behind).
struct Unmount(Vec<PathBuf>);

impl Drop for Unmount {
    fn drop(&mut self) {
        for d in &self.0 {
            if mounted(d) {
                let _ = std::process::Command::new("fusermount3")
                    .args(["-u", "-z"])
                    .arg(d)
                    .status();
            }
        }
    }
}

#[test]
fn a_config_mounts_each_entry_in_the_background() {
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path();
    let (a, b, ma, mb) = (t.join("a"), t.join("b"), t.join("ma"), t.join("mb"));
    for d in [&a, &b, &ma, &mb] {
        std::fs::create_dir(d).expect("dir");
    }
    std::fs::write(a.join("x.txt"), b"from a").expect("seed");
    let config = t.join("slate.toml");
    std::fs::write(
        &config,
        format!(
            "[[mounts]]\nsrc = {:?}\nmountpoint = {:?}\nread_only = true\n\n\
             [[mounts]]\nsrc = {:?}\nmountpoint = {:?}\nwrite_back = \"1s\"\n",
            a.display().to_string(),
            ma.display().to_string(),
            b.display().to_string(),
            mb.display().to_string()
        ),
    )
    .expect("config");
    let _guard = Unmount(vec![ma.clone(), mb.clone()]);
    let out = slate()
        .args(["mount", "--daemon", "--config"])
        .arg(&config)
        .arg("--cache-dir")
        .arg(t.join("cache"))
        .output()
        .expect("slate mount --daemon");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    // the command returned with both mounted, its process in the background
    assert!(mounted(&ma) && mounted(&mb), "{err}");
    let pid: i32 = err
        .split("pid ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("the daemon's pid in: {err}"));
    assert_eq!(std::fs::read(ma.join("x.txt")).expect("read"), b"from a");
    let e = std::fs::write(ma.join("no.txt"), b"x").expect_err("read-only entry");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    std::fs::write(mb.join("w.txt"), b"written").expect("write");
    wait_for("the second entry's write-back at its folder", 20, || {
        std::fs::read(b.join("w.txt")).ok().as_deref() == Some(&b"written"[..])
    });
    for d in [&ma, &mb] {
        let st = std::process::Command::new("fusermount3")
            .arg("-u")
            .arg(d)
            .status()
            .expect("fusermount3");
        assert!(st.success());
    }
    // SAFETY: kill(2) with signal 0 only asks whether the process is there
    wait_for("the background mount process gone", 20, || unsafe {
        libc::kill(pid, 0) != 0
    });
    // an entry the config gets wrong is named
    std::fs::write(&config, "[[mounts]]\nsrc = \"/x\"\nmount_point = \"/y\"\n").expect("config");
    let out = slate()
        .args(["mount", "--config"])
        .arg(&config)
        .output()
        .expect("slate mount");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("line 3") && err.contains("mount_point"),
        "{err}"
    );
}
