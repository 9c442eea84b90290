//! Symlinks in a local source: nothing outside the root ever reaches a destination. Trials for
//! the walks (`copy`, `sync --once`, `diff`), the daemon's watch, and the daemon's probe of
//! each key as it reconciles, each with a link to a file outside the root, a folder outside
//! it, `/`, a loop (a link to an ancestor), and a link swapped in while a file is copied.
//! Outside files hold a marker; every destination is scanned for it. Links inside the root
//! are skipped by default and followed with `--copy-links`.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// In every file outside the source root, and nowhere inside it.
const MARKER: &[u8] = b"SLATE-SYMLINK-TEST-OUTSIDE-MARKER";

/// Size of the file swapped for a link mid-copy: 13 chunks of 5 MiB.
const BIG: usize = 64 * MIB;

fn marker_bytes(len: usize) -> Vec<u8> {
    MARKER.iter().copied().cycle().take(len).collect()
}

/// A source folder with a link of every kind, next to an outside folder of markers.
struct Tree {
    _dir: tempfile::TempDir,
    top: PathBuf,
    src: PathBuf,
    outside: PathBuf,
}

impl Tree {
    /// Regular files `a.txt`, `d/b.txt`, `d/e/c.txt`, `victim.txt` and the links of `links`.
    fn new(links: bool) -> Tree {
        let dir = tempfile::tempdir().expect("tmp");
        let top = dir.path().to_path_buf();
        let (src, outside) = (top.join("src"), top.join("outside"));
        let t = Tree {
            _dir: dir,
            top,
            src,
            outside,
        };
        std::fs::create_dir_all(t.src.join("d/e")).expect("mkdir");
        std::fs::create_dir_all(t.outside.join("secret")).expect("mkdir");
        std::fs::write(t.outside.join("secret/key.pem"), MARKER).expect("write");
        std::fs::write(t.outside.join("file.txt"), MARKER).expect("write");
        for (k, v) in regular() {
            std::fs::write(t.src.join(k), v).expect("write");
        }
        if links {
            t.links();
        }
        t
    }

    /// Inside: `in-file -> a.txt`, `in-dir -> d`. Outside: a file, a folder (absolute and
    /// relative), `/`. Loops: `loop -> .`, `d/up -> ..`, `d/e/back -> ../../d`. And one that
    /// leads nowhere.
    fn links(&self) {
        self.link("a.txt", "in-file");
        self.link("d", "in-dir");
        self.link(self.outside.join("file.txt"), "out-file");
        self.link(&self.outside, "out-dir");
        self.link("../outside/secret", "out-rel");
        self.link("/", "to-root");
        self.link(".", "loop");
        self.link("..", "d/up");
        self.link("../../d", "d/e/back");
        self.link("nowhere", "dangling");
    }

    fn link(&self, target: impl AsRef<Path>, at: &str) {
        symlink(target, self.src.join(at)).expect("symlink");
    }

    /// Replaces `at` by a link to `target` in one rename (never absent meanwhile).
    fn swap_in_link(&self, target: &Path, at: &str) {
        let tmp = self.top.join(format!("swap-{}", unique("l")));
        symlink(target, &tmp).expect("symlink");
        std::fs::rename(&tmp, self.src.join(at)).expect("rename");
    }

    fn url(&self) -> String {
        self.src.display().to_string()
    }
}

fn regular() -> BTreeMap<&'static str, &'static [u8]> {
    [
        ("a.txt", &b"alpha"[..]),
        ("d/b.txt", b"beta"),
        ("d/e/c.txt", b"gamma"),
        ("victim.txt", b"victim"),
    ]
    .into()
}

/// What a destination holds after a copy of the [`Tree`]: skipping links, or following those
/// inside the root.
fn expected(copy_links: bool) -> BTreeMap<String, Vec<u8>> {
    let mut want: BTreeMap<String, Vec<u8>> = regular()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect();
    if copy_links {
        want.insert("in-file".into(), b"alpha".to_vec());
        want.insert("in-dir/b.txt".into(), b"beta".to_vec());
        want.insert("in-dir/e/c.txt".into(), b"gamma".to_vec());
    }
    want
}

/// Every file at a local destination (slate's temp files included), never following a link:
/// a destination holds none.
fn dest_files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let e = e.expect("entry");
            let ft = e.file_type().expect("file type");
            assert!(
                !ft.is_symlink(),
                "a symlink at the destination: {:?}",
                e.path()
            );
            if ft.is_dir() {
                stack.push(e.path());
            } else if let Ok(data) = std::fs::read(e.path()) {
                // (a temp file can be renamed away between the listing and the read)
                let rel = e.path().strip_prefix(root).expect("under root").to_owned();
                out.insert(rel.to_string_lossy().to_string(), data);
            }
        }
    }
    out
}

fn assert_no_marker(key: &str, data: &[u8]) {
    let leaked = data.windows(MARKER.len()).any(|w| w == MARKER);
    assert!(!leaked, "{key} holds bytes from outside the source root");
}

/// Nothing from outside the root: no file holds the marker. A file larger than 1 MiB can
/// only be the big file of a swap trial (`big`): whole once in place; a temp file still being
/// written holds its pages or zeros (any other page is scanned for the marker).
fn assert_clean(files: &BTreeMap<String, Vec<u8>>, big: Option<&[u8]>) {
    const PAGE: usize = 4096;
    let zeros = [0u8; PAGE];
    for (k, v) in files {
        if v.len() <= MIB {
            assert_no_marker(k, v);
            continue;
        }
        let big = big.unwrap_or_else(|| panic!("{k}: {} bytes not from the source", v.len()));
        if !k.contains(".slate-tmp-") {
            assert!(v.as_slice() == big, "{k}: not the source's bytes");
            continue;
        }
        for (i, page) in v.chunks(PAGE).enumerate() {
            let at = i * PAGE;
            let theirs = big.get(at..(at + page.len()).min(big.len())).unwrap_or(&[]);
            if page != theirs && page != &zeros[..page.len()] {
                assert_no_marker(&format!("{k} at {at}"), page);
            }
        }
    }
}

/// Runs `c` and waits at most `secs` for it to end (a walk that loops never would):
/// (exit code, stdout, stderr).
fn run_within(mut c: Command, secs: u64) -> (Option<i32>, String, String) {
    let (out, err) = (
        tempfile::tempfile().expect("tmp"),
        tempfile::tempfile().expect("tmp"),
    );
    c.stdout(out.try_clone().expect("dup"))
        .stderr(err.try_clone().expect("dup"));
    let mut child = c.spawn().expect("spawn slate");
    let code = wait_child(&mut child, secs);
    let text = |mut f: std::fs::File| {
        use std::io::{Read, Seek};
        let mut s = String::new();
        f.rewind().expect("rewind");
        f.read_to_string(&mut s).expect("read");
        s
    };
    (code, text(out), text(err))
}

fn wait_child(child: &mut std::process::Child, secs: u64) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("slate did not finish within {secs} s (a symlink loop?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn copy_cmd(src: &str, dst: &str, flags: &[&str]) -> Command {
    let mut c = slate();
    c.args(["copy", src, dst, "--chunk-size", "5MiB", "--quiet"])
        .args(flags);
    c
}

fn sync_once_cmd(db: &Path, src: &str, dst: &str, flags: &[&str]) -> Command {
    let mut c = slate_db(db);
    c.args([
        "sync",
        "--once",
        src,
        dst,
        "--chunk-size",
        "5MiB",
        "--quiet",
    ])
    .args(flags);
    c
}

/// Whether a log line names the link `src/{link}` (as its path, not one below it).
fn names(line: &str, link: &str) -> bool {
    let path = format!("src/{link}");
    line.contains(&format!("{path} ")) || line.ends_with(&path)
}

/// The warnings a run must print about the [`Tree`]'s links, each naming the link.
fn assert_links_named(stderr: &str, copy_links: bool) {
    let named = |link: &str, why: &str| {
        let found = stderr.lines().any(|l| names(l, link) && l.contains(why));
        assert!(found, "no '{why}' names {link}: {stderr}");
    };
    if copy_links {
        for link in ["out-file", "out-dir", "out-rel", "to-root"] {
            named(link, "leads outside the source root");
        }
        for link in ["loop", "d/up", "d/e/back"] {
            named(link, "a loop");
        }
        named("dangling", "leads nowhere");
    } else {
        for link in [
            "in-file", "in-dir", "out-file", "out-dir", "to-root", "loop", "d/up",
        ] {
            named(link, "skipping symlink");
        }
    }
}

#[test]
fn walk_copy_skips_links_and_with_copy_links_follows_only_those_inside() {
    let t = Tree::new(true);
    for copy_links in [false, true] {
        let dst = t.top.join(format!("dst-{copy_links}"));
        let flags: &[&str] = if copy_links { &["-L"] } else { &[] };
        let (code, _, err) = run_within(copy_cmd(&t.url(), &dst.display().to_string(), flags), 60);
        assert_eq!(code, Some(0), "{err}");
        let got = dest_files(&dst);
        assert_clean(&got, None);
        assert_same(&got, &expected(copy_links));
        assert_links_named(&err, copy_links);
    }
}

#[test]
fn walk_copy_to_s3_with_copy_links_uploads_nothing_from_outside() {
    let t = Tree::new(true);
    let dst = Place::new(End::S3("slate-dst"), "symlinks-copy");
    let (code, _, err) = run_within(copy_cmd(&t.url(), &dst.url(), &["--copy-links"]), 120);
    assert_eq!(code, Some(0), "{err}");
    let got = dst.read();
    assert_clean(&got, None);
    assert_same(&got, &expected(true));
}

#[test]
fn walk_sync_once_and_diff_apply_the_same_rule() {
    let t = Tree::new(true);
    for copy_links in [false, true] {
        let db = t.top.join(format!("slate-{copy_links}.db"));
        let dst = t
            .top
            .join(format!("dst-{copy_links}"))
            .display()
            .to_string();
        let flags: &[&str] = if copy_links { &["-L"] } else { &[] };
        let (code, _, err) = run_within(sync_once_cmd(&db, &t.url(), &dst, flags), 60);
        assert_eq!(code, Some(0), "{err}");
        assert_links_named(&err, copy_links);
        let got = dest_files(Path::new(&dst));
        assert_clean(&got, None);
        assert_same(&got, &expected(copy_links));
        // diff lists the source as the sync did: equal
        let mut diff = slate_db(&db);
        diff.args(["diff", &t.url(), &dst, "--json"]).args(flags);
        let (code, out, err) = run_within(diff, 60);
        assert_eq!(code, Some(0), "diff: {out}\n{err}");
        // and a second run changes nothing
        let (code, _, err) = run_within(sync_once_cmd(&db, &t.url(), &dst, flags), 60);
        assert_eq!(code, Some(0), "{err}");
        assert_same(&dest_files(Path::new(&dst)), &expected(copy_links));
    }
}

/// Waits until slate's temp file shows up at the local destination `dst` (a copy has opened
/// the source and is writing), or slate exits; true when the temp file was seen.
fn copy_started(child: &mut std::process::Child, dst: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let busy = std::fs::read_dir(dst)
            .map(|rd| {
                rd.flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with(".slate-tmp-"))
            })
            .unwrap_or(false);
        if busy {
            return true;
        }
        if child.try_wait().expect("wait").is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("no copy started within 60 s");
}

#[test]
fn walk_a_link_swapped_in_during_a_copy_is_never_followed() {
    let original = bytes(7, BIG);
    let mut caught = 0;
    for sync in [false, true] {
        for copy_links in [false, true] {
            let t = Tree::new(false);
            std::fs::write(t.src.join("big.bin"), &original).expect("write");
            std::fs::write(t.outside.join("big.bin"), marker_bytes(BIG)).expect("write");
            let dst = t.top.join("dst");
            std::fs::create_dir_all(&dst).expect("mkdir");
            let (src_url, dst_url) = (t.url(), dst.display().to_string());
            let mut flags = vec!["--transfers", "1", "--streams", "1"];
            if copy_links {
                flags.push("-L");
            }
            let mut c = if sync {
                sync_once_cmd(&t.top.join("slate.db"), &src_url, &dst_url, &flags)
            } else {
                copy_cmd(&src_url, &dst_url, &flags)
            };
            let err_path = t.top.join("stderr");
            c.stdout(Stdio::null())
                .stderr(std::fs::File::create(&err_path).expect("stderr"));
            let mut child = c.spawn().expect("spawn");
            // a temp file: the listing (which runs ahead of the copies) has seen big.bin, and
            // its copy is under way or next
            if copy_started(&mut child, &dst) {
                t.swap_in_link(&t.outside.join("big.bin"), "big.bin");
            }
            let code = wait_child(&mut child, 120);
            let err = std::fs::read_to_string(&err_path).unwrap_or_default();
            let got = dest_files(&dst);
            assert_clean(&got, Some(&original));
            match (got.get("big.bin"), code) {
                // finished before the swap: the original, whole
                (Some(b), Some(0)) => assert!(b == &original, "big.bin is not the source's"),
                // refused mid-copy, naming the file and the link
                (None, Some(1)) => {
                    let line = err.lines().find(|l| l.contains("big.bin")).unwrap_or("");
                    assert!(line.contains("symlink"), "{err}");
                    caught += 1;
                }
                // the listing itself already saw the link (and skipped it)
                (None, Some(0)) => {}
                (b, code) => panic!("exit {code:?}, big.bin {:?}: {err}", b.map(Vec::len)),
            }
            assert!(!got.keys().any(|k| k.contains(".slate-tmp-")), "{got:?}");
        }
    }
    eprintln!("{caught} of 4 copies refused the link mid-copy");
    assert!(
        caught > 0,
        "no copy was caught mid-way: the trial did not swap in time"
    );
}

/// Whether the daemon's log shows `key` reconciled.
fn applied(log: &str, key: &str) -> bool {
    log.lines()
        .any(|l| l.contains("applied") && l.contains(&format!("key={key} ")))
}

/// The links of a watch trial, made while the daemon runs: to a file, a folder, `/`, an
/// ancestor; and a folder moved in that holds a link out, through which the watcher (which
/// follows links) then reports files written outside.
fn make_links_while_watched(t: &Tree) {
    t.link(t.outside.join("file.txt"), "out-file");
    t.link(&t.outside, "out-dir");
    t.link("/", "to-root");
    t.link(&t.src, "loop");
    t.link("..", "d/up");
    t.link("a.txt", "in-file");
    let moved = t.top.join("moved");
    std::fs::create_dir_all(&moved).expect("mkdir");
    symlink(&t.outside, moved.join("link")).expect("symlink");
    std::fs::write(moved.join("plain.txt"), b"plain").expect("write");
    std::fs::rename(&moved, t.src.join("moved")).expect("mv in");
}

fn watch_trial(copy_links: bool) {
    let t = Tree::new(false);
    let (db, log) = (t.top.join("slate.db"), t.top.join("daemon.log"));
    let dst = t.top.join("dst");
    let flags: &[&str] = if copy_links { &["-L"] } else { &[] };
    let mut d = Daemon::start(&db, &t.url(), &dst.display().to_string(), flags, &log);
    assert_same(&dest_files(&dst), &expected(false));

    make_links_while_watched(&t);
    // written outside after the links exist: events come in under the links' names
    wait_for("the moved folder is reconciled", 30, || {
        applied(&d.log_text(), "moved/plain.txt")
    });
    std::fs::write(t.outside.join("new.pem"), MARKER).expect("write");
    std::fs::write(t.outside.join("secret/key.pem"), [MARKER, MARKER].concat()).expect("write");
    std::fs::write(t.src.join("sentinel.txt"), b"last").expect("write");

    let mut want = expected(false);
    want.insert("moved/plain.txt".into(), b"plain".to_vec());
    want.insert("sentinel.txt".into(), b"last".to_vec());
    if copy_links {
        want.insert("in-file".into(), b"alpha".to_vec());
    }
    // the watcher never watches through a link (notify would follow one to `/`): what is
    // written outside reaches the daemon as no event at all
    wait_for("the daemon applies every event", 30, || {
        let log = d.log_text();
        applied(&log, "sentinel.txt")
            && applied(&log, "to-root")
            && dest_files(&dst).len() == want.len()
    });
    let got = dest_files(&dst);
    assert_clean(&got, None);
    assert_same(&got, &want);
    let log = d.log_text();
    assert!(
        !log.contains("moved/link/new.pem") && !log.contains("moved/link/secret"),
        "the watcher looked through a link: {log}"
    );
    for key in ["to-root", "out-file"] {
        assert!(
            log.lines()
                .any(|l| l.contains(&format!("key={key} ")) && l.contains("a=AlreadyGone")),
            "{key} was not refused by the probe: {log}"
        );
    }
    assert!(d.alive(), "the daemon died: {log}");
    assert_eq!(d.stop(), Some(0), "{}", d.log_text());
}

#[test]
fn watch_the_daemon_skips_links_made_while_it_runs_and_stays_up() {
    watch_trial(false);
}

#[test]
fn watch_the_daemon_with_copy_links_follows_only_links_inside() {
    watch_trial(true);
}

/// The daemon's probe of a key as it reconciles: a file replaced by a link (out, in, `/`, an
/// ancestor), and a big file replaced by a link to outside bytes while the daemon copies it.
fn apply_trial(copy_links: bool) {
    let t = Tree::new(true);
    let (db, log) = (t.top.join("slate.db"), t.top.join("daemon.log"));
    let dst = t.top.join("dst");
    let flags: &[&str] = if copy_links {
        &["-L", "--streams", "1"]
    } else {
        &["--streams", "1"]
    };
    // the links are there before the start but `/`: the watcher's own walk of the folder
    // follows links (notify's default), and would set a watch on every folder of the machine
    std::fs::remove_file(t.src.join("to-root")).expect("rm");
    let mut d = Daemon::start(&db, &t.url(), &dst.display().to_string(), flags, &log);
    let mut want = expected(copy_links);
    assert_clean(&dest_files(&dst), None);
    assert_same(&dest_files(&dst), &want);

    // keys replaced by links: the probe finds nothing to copy and the replica goes
    std::fs::copy(t.src.join("a.txt"), t.src.join("to-be-root")).expect("cp");
    std::fs::copy(t.src.join("a.txt"), t.src.join("to-be-loop")).expect("cp");
    std::fs::copy(t.src.join("a.txt"), t.src.join("to-be-inside")).expect("cp");
    wait_for("the new files are copied", 30, || {
        applied(&d.log_text(), "to-be-inside") && applied(&d.log_text(), "to-be-loop")
    });
    t.swap_in_link(&t.outside.join("file.txt"), "victim.txt");
    t.swap_in_link(Path::new("/"), "to-be-root");
    t.swap_in_link(&t.src, "to-be-loop");
    t.swap_in_link(Path::new("d/b.txt"), "to-be-inside");
    want.remove("victim.txt");
    if copy_links {
        want.insert("to-be-inside".into(), b"beta".to_vec());
    }

    // a big file replaced by a link to outside bytes while the daemon copies it
    let original = bytes(9, BIG);
    std::fs::write(t.outside.join("big.bin"), marker_bytes(BIG)).expect("write");
    std::fs::write(t.top.join("big.bin"), &original).expect("write");
    std::fs::rename(t.top.join("big.bin"), t.src.join("big.bin")).expect("mv in");
    let mut scans = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let started = loop {
        let files = dest_files(&dst);
        if files.keys().any(|k| k.starts_with(".slate-tmp-")) {
            break true;
        }
        if files.contains_key("big.bin") || Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    t.swap_in_link(&t.outside.join("big.bin"), "big.bin");
    std::fs::write(t.src.join("sentinel.txt"), b"last").expect("write");
    want.insert("sentinel.txt".into(), b"last".to_vec());
    wait_for("the daemon applies every event", 60, || {
        scans += 1;
        let got = dest_files(&dst);
        assert_clean(&got, Some(&original));
        let mut keys: Vec<_> = got.keys().filter(|k| !k.contains(".slate-tmp-")).collect();
        keys.retain(|k| *k != "big.bin");
        keys.len() == want.len()
            && keys.iter().all(|k| want.contains_key(*k))
            && !got.contains_key("big.bin")
            && applied(&d.log_text(), "big.bin")
    });
    let got = dest_files(&dst);
    assert_clean(&got, Some(&original));
    assert_same(&got, &want);
    let log = d.log_text();
    assert!(started, "the big copy was not seen under way: {log}");
    assert!(scans > 0);
    assert!(d.alive(), "the daemon died: {log}");
    assert_eq!(d.stop(), Some(0), "{}", d.log_text());
}

#[test]
fn apply_the_probe_refuses_keys_replaced_by_links() {
    apply_trial(false);
}

#[test]
fn apply_with_copy_links_the_probe_follows_only_links_inside() {
    apply_trial(true);
}
