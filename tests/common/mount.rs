//! A `slate mount` of a test (tests/mount.rs, tests/mount_posix.rs): started and waited for,
//! watched by a watchdog, unmounted when dropped.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{read_log, slate, spawn_ready, wait_for, Child};

/// Whether `dir` is a mount point now (/proc/mounts).
pub fn mounted(dir: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let want = dir.to_string_lossy().to_string();
    text.lines()
        .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
}

/// A mount of a test: unmounted (lazily, if it must) and its process killed when dropped,
/// so a failing test leaves no dead mount point.
pub struct Mounted {
    pub child: Option<Child>,
    pub dir: PathBuf,
    pub log: PathBuf,
    /// Set when the test is done with the mount: the watchdog stands down.
    pub done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// How long a test may use a mount: past it, the watchdog kills the mount and detaches it,
/// so a hung file system fails the test (its calls return ENOTCONN) instead of hanging CI.
pub const MOUNT_DEADLINE: Duration = Duration::from_secs(240);

impl Mounted {
    pub fn start(src: &str, dir: &Path, log: &Path, extra: &[&str]) -> Mounted {
        std::fs::create_dir_all(dir).expect("mount point");
        let mut c = slate();
        c.args(["mount", src])
            .arg(dir)
            .args(extra)
            .env("RUST_LOG", "slate=debug,fuser=error,warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).expect("log"));
        let child = spawn_ready(c, log, 60, |t| t.contains("mounted on"));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (pid, watched, d) = (child.id() as i32, done.clone(), dir.to_path_buf());
        std::thread::spawn(move || {
            let until = Instant::now() + MOUNT_DEADLINE;
            while Instant::now() < until {
                if watched.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            eprintln!(
                "watchdog: the mount on {} outlived {MOUNT_DEADLINE:?}: killed",
                d.display()
            );
            // SAFETY: kill(2) of the test's own child (not reaped: the test still holds it)
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = std::process::Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&d)
                .status();
        });
        let m = Mounted {
            child: Some(child),
            dir: dir.to_path_buf(),
            log: log.to_path_buf(),
            done,
        };
        wait_for("the mount in /proc/mounts", 10, || mounted(dir));
        m
    }

    pub fn log_text(&self) -> String {
        read_log(&self.log)
    }

    /// SIGTERM: the exit code once unmounted.
    pub fn stop(&mut self) -> Option<i32> {
        self.child
            .take()
            .and_then(|c| c.stop_within(libc::SIGTERM, 20))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if mounted(&self.dir) {
            let _ = std::process::Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.dir)
                .status();
        }
    }
}
