//! Local folders as an event source (inotify through the notify crate): create, modify,
//! close-write, rename and delete become keys for the inbox, debounced. Only receives and
//! normalises; the daemon reconciles.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{Event, EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::core::error::SlateError;
use crate::stores::local::TMP_PREFIX;

/// What a burst of file events touched: keys relative to the watched root (`/`-separated).
/// A path that is a folder (or was one) is reported as is; the daemon expands it.
pub type Keys = BTreeSet<String>;

/// Batches in flight between the watcher and the daemon: when the daemon cannot keep up, the
/// watcher waits (back-pressure) instead of holding an unbounded queue; events that pile up
/// meanwhile overflow inotify's own queue, which is reported as a rescan.
pub const CHANNEL: usize = 64;

/// Raw file events waiting between notify's thread and the debouncer.
const RAW_EVENTS: usize = 4096;

/// Keys one batch holds at most; past that the batch becomes a rescan of the root.
const MAX_KEYS: usize = 50_000;

/// One debounced batch of the watcher's news.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Batch {
    pub keys: Keys,
    /// Folders (keys relative to the root; `""` for the root) whose events were lost (the
    /// kernel's queue overflowed): everything under them must be reconciled.
    pub rescan: Vec<String>,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.rescan.is_empty()
    }
}

/// Keeps the watcher alive; dropping it stops watching.
pub struct WatchHandle {
    _watcher: notify::RecommendedWatcher,
}

/// The key of `path` under `root`, if it is one slate should look at.
pub fn key_of(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let name = rel.file_name()?.to_str()?;
    if name.starts_with(TMP_PREFIX) {
        return None;
    }
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    Some(parts?.join("/"))
}

/// Starts watching `root` recursively; every `debounce`, the keys touched are sent on `tx`.
pub fn watch(
    root: PathBuf,
    debounce: Duration,
    tx: mpsc::Sender<Batch>,
) -> Result<WatchHandle, SlateError> {
    // Bounded: when the daemon falls behind, notify's reading thread waits here, the kernel's
    // queue fills up and overflows, and the overflow comes back as a rescan. Nothing grows
    // without bound in slate, and nothing is lost.
    let (raw_tx, mut raw_rx) = mpsc::channel::<Event>(RAW_EVENTS);
    let handler = move |res: notify::Result<Event>| match res {
        Ok(ev) => {
            let _ = raw_tx.blocking_send(ev);
        }
        Err(e) => tracing::warn!(error = %e, "file watch error"),
    };
    // Never into a symlink: notify would follow a link to `/` and watch the whole machine,
    // and report files outside the root under the link's name. Links are the walkers' and
    // the probe's business (rule 7), never the watcher's.
    let config = notify::Config::default().with_follow_symlinks(false);
    let mut watcher =
        notify::RecommendedWatcher::new(handler, config).map_err(|e| watch_err(&root, e))?;
    watcher
        .watch(&root, RecursiveMode::Recursive)
        .map_err(|e| watch_err(&root, e))?;
    tokio::spawn(async move {
        // Keys are sent at most `debounce` after the first event of a batch (not after a quiet
        // spell, which a steady stream of writes would never leave).
        let mut pending = Batch::default();
        let mut deadline = tokio::time::Instant::now();
        loop {
            let ev = if pending.is_empty() {
                let ev = raw_rx.recv().await;
                deadline = tokio::time::Instant::now() + debounce;
                ev
            } else {
                match tokio::time::timeout_at(deadline, raw_rx.recv()).await {
                    Ok(ev) => ev,
                    Err(_) => {
                        if tx.send(std::mem::take(&mut pending)).await.is_err() {
                            return;
                        }
                        continue;
                    }
                }
            };
            let Some(ev) = ev else { return };
            if ev.need_rescan() {
                // the kernel dropped events (IN_Q_OVERFLOW): what changed is unknown
                tracing::warn!(root = %root.display(), "file events were lost (the kernel's queue overflowed): reconciling the whole folder");
                if !pending.rescan.iter().any(|d| d.is_empty()) {
                    pending.rescan.push(String::new());
                }
                continue;
            }
            if matches!(ev.kind, EventKind::Access(_)) {
                continue;
            }
            for p in &ev.paths {
                if let Some(k) = key_of(&root, p) {
                    pending.keys.insert(k);
                }
            }
            if pending.keys.len() > MAX_KEYS {
                // more keys than a batch should hold: the whole folder is reconciled instead
                pending.keys.clear();
                if !pending.rescan.iter().any(|d| d.is_empty()) {
                    pending.rescan.push(String::new());
                }
            }
        }
    });
    Ok(WatchHandle { _watcher: watcher })
}

fn watch_err(root: &Path, e: notify::Error) -> SlateError {
    let hint =
        if e.to_string().contains("No space left") || e.to_string().contains("max_user_watches") {
            " (the inotify watch limit is reached: raise fs.inotify.max_user_watches)"
        } else {
            ""
        };
    SlateError::Store {
        url: root.display().to_string(),
        detail: format!("cannot watch: {e}{hint}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_relative_and_skip_temp_files() {
        let root = Path::new("/data");
        assert_eq!(
            key_of(root, Path::new("/data/a/b c.txt")).as_deref(),
            Some("a/b c.txt")
        );
        assert_eq!(key_of(root, Path::new("/data/.slate-tmp-1-2")), None);
        assert_eq!(key_of(root, Path::new("/elsewhere/x")), None);
        assert_eq!(key_of(root, Path::new("/data")), None);
    }

    #[tokio::test]
    async fn a_steady_stream_of_writes_is_not_held_back() {
        // a write every 20 ms, for 2 s: with a quiet-period debounce nothing would be sent
        // until the stream stops; keys must flow while it goes on
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let (tx, mut rx) = mpsc::channel(1024);
        let _h = watch(root.clone(), Duration::from_millis(100), tx).unwrap();
        let writer = std::thread::spawn(move || {
            for i in 0..100 {
                std::fs::write(root.join(format!("f{i}")), b"x").unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("keys within 10 s")
            .expect("channel open");
        assert!(!first.is_empty());
        assert!(
            !writer.is_finished(),
            "the first keys came only after the writes stopped"
        );
        writer.join().unwrap();
    }

    #[tokio::test]
    async fn sees_creates_writes_renames_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        // (a folder created after the watch starts is reported itself: files written into it
        // before its own watch is in place are found by expanding it, in the daemon)
        std::fs::create_dir_all(root.join("sub")).unwrap();
        // a file that exists before the watch: only its delete can name it
        std::fs::write(root.join("sub/old.txt"), b"0").unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let _h = watch(root.clone(), Duration::from_millis(100), tx).unwrap();
        std::fs::write(root.join("sub/a.txt"), b"1").unwrap();
        std::fs::write(root.join("b.txt"), b"2").unwrap();
        std::fs::rename(root.join("b.txt"), root.join("c.txt")).unwrap();
        std::fs::remove_file(root.join("sub/a.txt")).unwrap();
        std::fs::remove_file(root.join("sub/old.txt")).unwrap();
        let mut seen = Keys::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !(seen.contains("sub/a.txt")
            && seen.contains("b.txt")
            && seen.contains("c.txt")
            && seen.contains("sub/old.txt"))
        {
            let keys = tokio::time::timeout_at(deadline, rx.recv())
                .await
                .expect("events in time")
                .unwrap();
            seen.extend(keys.keys);
        }
    }
}
