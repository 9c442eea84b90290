//! Prefix events, expanded in bounded, durable steps. A prefix to reconcile as a whole (an
//! Azure directory deleted or renamed, a folder that appeared or vanished under a watched
//! root, an inotify queue overflow) is stored as one row when its message arrives; then each
//! [`Expander::step`] pushes one page (at most [`PAGE`] keys) into the inbox and moves the
//! expansion's cursor in the same transaction. Memory never holds more than one page, however
//! many keys the prefix has, and a crash resumes after the last page stored.
//!
//! Phase 0 lists the source under the prefix (the cursor is the listing's page token, or for a
//! local folder the last key pushed); phase 1 pushes the keys the manifest recorded there
//! (objects renamed away or deleted are among them). The reconcile of each key then asks the
//! source, as for any event.

use std::sync::Arc;

use object_store::list::PaginatedListOptions;

use crate::core::error::{Result, SlateError};
use crate::state::blocking;
use crate::state::inbox::{Expansion, Inbox, Kind};
use crate::state::manifest::{self, Manifest};
use crate::stores::local::{self as local_store, Walked};
use crate::stores::side::{one_line, prefix_path, Side};

/// Whether `dir` is a folder that a walk of `root` reaches under the symlink rule: no link on
/// the way (or, with links followed, one that stays inside the root).
fn folder_within(root: &std::path::Path, dir: &std::path::Path, follow: bool) -> bool {
    let (Ok(real_root), Ok(real)) = (std::fs::canonicalize(root), std::fs::canonicalize(dir))
    else {
        return false;
    };
    let rel = dir.strip_prefix(root).unwrap_or(dir);
    let inside = if follow {
        real.starts_with(&real_root)
    } else {
        real == real_root.join(rel)
    };
    inside && real.is_dir()
}

/// Keys pushed per step.
pub const PAGE: usize = 1000;

/// The expansions of one pair.
pub struct Expander {
    db: Arc<Manifest>,
    pair_id: i64,
    /// The source; a local one carries its symlink rule (`--copy-links`).
    src: Side,
}

/// Joins a pair-relative prefix (`''` or ending with `/`) and a key relative to it.
fn join(prefix: &str, rel: &str) -> String {
    format!("{prefix}{rel}")
}

impl Expander {
    pub fn new(db: Arc<Manifest>, pair_id: i64, src: Side) -> Expander {
        Expander { db, pair_id, src }
    }

    /// One step of the oldest pending expansion; false when there is none.
    pub async fn step(&self) -> Result<bool> {
        let (db, id) = (self.db.clone(), self.pair_id);
        let pending = blocking(move || Inbox::new(&db).expansions(id)).await?;
        let Some(x) = pending.into_iter().next() else {
            return Ok(false);
        };
        let (rows, phase, cursor, finished) = match x.phase {
            0 => {
                let (keys, next) = self.list_page(&x).await?;
                let rows = keys
                    .into_iter()
                    .map(|k| (k, Kind::Upsert, None))
                    .collect::<Vec<_>>();
                match next {
                    Some(c) => (rows, 0, c, false),
                    None => (rows, 1, String::new(), false),
                }
            }
            _ => {
                let (db, id, prefix, after) = (
                    self.db.clone(),
                    self.pair_id,
                    x.prefix.clone(),
                    x.cursor.clone(),
                );
                let keys = blocking(move || {
                    db.keys_under_page(id, manifest::Side::Src, &prefix, &after, PAGE)
                })
                .await?;
                let last = keys.last().cloned();
                let rows = keys
                    .into_iter()
                    .map(|k| (k, Kind::Delete, None))
                    .collect::<Vec<_>>();
                match last {
                    Some(l) if rows.len() >= PAGE => (rows, 1, l, false),
                    _ => (rows, 1, String::new(), true),
                }
            }
        };
        let (db, id, prefix) = (self.db.clone(), self.pair_id, x.prefix.clone());
        blocking(move || {
            Inbox::new(&db).expansion_step(id, &prefix, &rows, phase, &cursor, finished)
        })
        .await?;
        Ok(true)
    }

    /// One page of the source's listing under the expansion's prefix, after its cursor:
    /// (pair-relative keys, the cursor of the next page or None at the end).
    async fn list_page(&self, x: &Expansion) -> Result<(Vec<String>, Option<String>)> {
        match &self.src {
            Side::Cloud { pager, loc, .. } => {
                let full = loc.key_for(&x.prefix);
                let base = if loc.prefix.is_empty() {
                    String::new()
                } else {
                    format!("{}/", loc.prefix)
                };
                let prefix = if full.is_empty() || full == "/" {
                    None
                } else {
                    Some(prefix_path(&full)?.to_string() + "/")
                };
                let opts = PaginatedListOptions {
                    max_keys: Some(PAGE),
                    page_token: (!x.cursor.is_empty()).then(|| x.cursor.clone()),
                    ..Default::default()
                };
                let page = crate::stores::retry::Retry::default()
                    .for_store(loc.scheme.short())
                    .request(
                        "listing",
                        |_| true,
                        |_| pager.list_paginated(prefix.as_deref(), opts.clone()),
                    )
                    .await
                    .map_err(|e| SlateError::List {
                        url: format!("{loc}/{}", x.prefix),
                        detail: one_line(&e),
                    })?;
                let keys = page
                    .result
                    .objects
                    .into_iter()
                    .filter_map(|m| m.location.as_ref().strip_prefix(&base).map(str::to_string))
                    .filter(|k| !k.is_empty())
                    .collect();
                Ok((keys, page.page_token.filter(|t| !t.is_empty())))
            }
            Side::Local { loc } => {
                let (root, prefix, after, follow) = (
                    loc.local_path(),
                    x.prefix.clone(),
                    x.cursor.clone(),
                    loc.copy_links,
                );
                blocking(move || {
                    let dir = root.join(prefix.trim_end_matches('/'));
                    let mut keys = Vec::new();
                    let start = after
                        .strip_prefix(prefix.as_str())
                        .unwrap_or_default()
                        .to_string();
                    // a folder that is not there (gone, or reached through a symlink that is
                    // not followed, or one that leads out of the root) lists nothing: its
                    // recorded keys come in phase 1
                    if folder_within(&root, &dir, follow) {
                        local_store::walk_sorted_with(&dir, follow, &start, &mut |w| {
                            match w {
                                Walked::File(f) => keys.push(join(&prefix, &f.rel)),
                                // pushed all the same: its reconcile reports why it cannot
                                // be read, and retries
                                Walked::Unreadable { rel, .. } => keys.push(join(&prefix, &rel)),
                                Walked::BadName { path } => tracing::warn!(path = %path.display(),
                                    "file name is not valid UTF-8; keys must be: skipped"),
                            }
                            keys.len() < PAGE
                        })?;
                    }
                    let next = (keys.len() >= PAGE).then(|| keys.last().cloned()).flatten();
                    Ok((keys, next))
                })
                .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::location::Location;
    use crate::state::inbox::Intake;
    use crate::state::manifest::{Record, State};

    #[tokio::test]
    async fn a_prefix_expands_page_by_page_and_resumes_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("src");
        std::fs::create_dir_all(root.join("big/sub")).unwrap();
        for i in 0..2_500 {
            let d = if i % 2 == 0 { "big" } else { "big/sub" };
            std::fs::write(root.join(format!("{d}/f{i:05}")), b"x").unwrap();
        }
        std::fs::write(root.join("other.txt"), b"y").unwrap();
        let db = Arc::new(Manifest::open(&dir.path().join("db")).unwrap());
        let pair = db.pair(&root.display().to_string(), "/tmp/x").unwrap().id;
        // keys the manifest recorded under the prefix that the folder no longer has
        let recs: Vec<Record> = (0..1_200)
            .map(|i| Record {
                side: manifest::Side::Src,
                key: format!("big/gone{i:05}"),
                state: State {
                    size: 1,
                    etag: None,
                    mtime_ms: None,
                },
                hash: None,
            })
            .collect();
        db.record(pair, &recs).unwrap();
        Inbox::new(&db)
            .store(&Intake {
                prefixes: vec![(pair, "big/".into())],
                ..Default::default()
            })
            .unwrap();
        let src = Side::Local {
            loc: Location::parse(&format!("{}/", root.display())).unwrap(),
        };
        let pending = || Inbox::new(&db).take(pair, 100_000).unwrap();
        let x = Expander::new(db.clone(), pair, src.clone());
        assert!(x.step().await.unwrap());
        assert_eq!(pending().len(), PAGE, "one page per step");
        assert!(x.step().await.unwrap());
        // a crash: a new expander (a restarted daemon) goes on from the stored cursor
        drop(x);
        let x = Expander::new(db.clone(), pair, src);
        let mut steps = 2;
        while x.step().await.unwrap() {
            steps += 1;
            assert!(steps < 20, "the expansion does not end");
        }
        // 2,500 listed (3 pages) + 1,200 recorded (2 pages)
        assert_eq!(steps, 5);
        let keys: std::collections::BTreeSet<String> =
            pending().into_iter().map(|p| p.key).collect();
        assert_eq!(keys.len(), 3_700, "every key once, none lost or doubled");
        assert!(keys.contains("big/sub/f00001") && keys.contains("big/gone01199"));
        assert!(!keys.contains("other.txt"), "nothing outside the prefix");
        assert!(Inbox::new(&db).expansions(pair).unwrap().is_empty());
    }
}
