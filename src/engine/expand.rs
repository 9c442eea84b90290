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

use std::time::Duration;

use crate::core::backoff::Backoff;
use crate::core::error::{Result, SlateError};
use crate::state::blocking;
use crate::state::inbox::{Expansion, Inbox, Kind};
use crate::state::manifest::{self, Manifest};
use crate::stores::list;
use crate::stores::local::{self as local_store, Walked};
use crate::stores::side::{one_line, prefix_path, Side};

/// Keys pushed per step.
pub const PAGE: usize = 1000;

/// The expansions of one pair.
pub struct Expander {
    db: Arc<Manifest>,
    pair_id: i64,
    /// The source; a local one carries its symlink rule (`--copy-links`).
    src: Side,
}

impl Expander {
    pub fn new(db: Arc<Manifest>, pair_id: i64, src: Side) -> Expander {
        Expander { db, pair_id, src }
    }

    /// One step of the oldest expansion that is due; false when there is none. A step that
    /// fails (the source cannot be listed now, a folder cannot be read) is tried again after a
    /// growing pause, with its reason kept; it never stops the pair.
    pub async fn step(&self) -> Result<bool> {
        let (db, id) = (self.db.clone(), self.pair_id);
        let Some(x) = blocking(move || Inbox::new(&db).next_expansion(id)).await? else {
            return Ok(false);
        };
        let (rows, phase, cursor, finished) = match self.page(&x).await {
            Ok(step) => step,
            Err(e) => {
                let delay = Backoff {
                    initial: Duration::from_secs(1),
                    max: Duration::from_secs(300),
                    ..Backoff::forever()
                }
                .cap(x.attempts + 2);
                let why = one_line(&e);
                tracing::warn!(prefix = %x.prefix, error = %why, retry_in_ms = delay.as_millis() as u64,
                    "expanding a prefix failed; it is tried again after a pause");
                let (db, id) = (self.db.clone(), self.pair_id);
                blocking(move || {
                    Inbox::new(&db).expansion_failed(id, &x, delay.as_millis() as i64, &why)
                })
                .await?;
                return Ok(true);
            }
        };
        let (db, id) = (self.db.clone(), self.pair_id);
        blocking(move || Inbox::new(&db).expansion_step(id, &x, &rows, phase, &cursor, finished))
            .await?;
        Ok(true)
    }

    /// One page of `x`: (rows, next phase, next cursor, finished).
    async fn page(&self, x: &Expansion) -> Result<(Vec<Row>, u8, String, bool)> {
        if x.phase == 0 {
            let (keys, next) = self.list_page(x).await?;
            let rows = keys.into_iter().map(|k| (k, Kind::Upsert, None)).collect();
            return Ok(match next {
                Some(c) => (rows, 0, c, false),
                None => (rows, 1, String::new(), false),
            });
        }
        let (db, id, prefix, after) = (
            self.db.clone(),
            self.pair_id,
            x.prefix.clone(),
            x.cursor.clone(),
        );
        let keys =
            blocking(move || db.keys_under_page(id, manifest::Side::Src, &prefix, &after, PAGE))
                .await?;
        let last = keys.last().cloned();
        let rows: Vec<Row> = keys.into_iter().map(|k| (k, Kind::Delete, None)).collect();
        Ok(match last {
            Some(l) if rows.len() >= PAGE => (rows, 1, l, false),
            _ => (rows, 1, String::new(), true),
        })
    }

    /// One page of the source's listing under the expansion's prefix, after its cursor:
    /// (pair-relative keys, the cursor of the next page or None at the end).
    async fn list_page(&self, x: &Expansion) -> Result<(Vec<String>, Option<String>)> {
        match &self.src {
            Side::Cloud {
                store, pager, loc, ..
            } => {
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
                // folder markers (`a/b/`, listed as `a/b`) are not objects, as in every listing
                let zero = page.result.objects.iter().filter(|m| m.size == 0);
                let markers =
                    list::markers(store, zero.map(|m| m.location.clone()).collect()).await;
                let keys = page
                    .result
                    .objects
                    .into_iter()
                    .filter(|m| !markers.contains(&m.location))
                    .filter_map(|m| m.location.as_ref().strip_prefix(&base).map(str::to_string))
                    .filter(|k| !k.is_empty())
                    .collect();
                Ok((keys, page.page_token.filter(|t| !t.is_empty())))
            }
            Side::Local { loc } => {
                let (root, prefix, cursor, follow) = (
                    loc.local_path(),
                    x.prefix.clone(),
                    x.cursor.clone(),
                    loc.copy_links,
                );
                blocking(move || {
                    // walked from the root under the source's symlink rule (a link on the
                    // way to the prefix is judged as every walk judges it), from the prefix
                    // or the cursor on, until the first key outside the prefix
                    let after = if cursor.as_str() > prefix.as_str() {
                        cursor
                    } else {
                        prefix.clone()
                    };
                    let mut keys = Vec::new();
                    local_store::walk_sorted_with(&root, follow, &after, &mut |w| {
                        let key = match &w {
                            Walked::File(f) => &f.rel,
                            Walked::Unreadable { rel, .. } => rel,
                            Walked::BadName { path } => {
                                tracing::warn!(path = %path.display(),
                                    "file name is not valid UTF-8; keys must be: skipped");
                                return true;
                            }
                        };
                        if !key.starts_with(prefix.as_str()) {
                            return false;
                        }
                        match w {
                            Walked::File(f) => keys.push(f.rel),
                            // a file that cannot be read is pushed all the same: its
                            // reconcile reports why, and retries
                            Walked::Unreadable { rel, folder: false, .. } => keys.push(rel),
                            // a folder that cannot be read: its keys are unknown now
                            Walked::Unreadable { rel, error, .. } => {
                                tracing::warn!(folder = %rel, error = %error,
                                    "a folder under an expanded prefix cannot be read: its files wait for the next rescan or drift check")
                            }
                            Walked::BadName { .. } => {}
                        }
                        keys.len() < PAGE
                    })?;
                    let next = (keys.len() >= PAGE).then(|| keys.last().cloned()).flatten();
                    Ok((keys, next))
                })
                .await
            }
        }
    }
}

/// One inbox row to be: key, what happened, ordering token.
type Row = (String, Kind, Option<String>);

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
                equal_by: None,
                meta: None,
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
        assert_eq!(Inbox::new(&db).expansion_count(pair).unwrap(), 0);
    }

    #[tokio::test]
    async fn a_step_that_fails_waits_and_a_restart_is_never_lost() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Manifest::open(&dir.path().join("db")).unwrap());
        let pair = db.pair("/nowhere", "/tmp/x").unwrap().id;
        let store = |prefix: &str| {
            Inbox::new(&db)
                .store(&Intake {
                    prefixes: vec![(pair, prefix.into())],
                    ..Default::default()
                })
                .unwrap()
        };
        // a source that cannot be listed: the step reports nothing, the expansion waits
        store("a/");
        let src = Side::Local {
            loc: Location::parse(&format!("{}/missing/", dir.path().display())).unwrap(),
        };
        let x = Expander::new(db.clone(), pair, src);
        assert!(
            x.step().await.unwrap(),
            "the failed step counts as work done"
        );
        assert_eq!(
            Inbox::new(&db).next_expansion(pair).unwrap(),
            None,
            "it waits"
        );
        assert_eq!(
            Inbox::new(&db).expansion_count(pair).unwrap(),
            1,
            "and is kept"
        );
        assert!(!x.step().await.unwrap(), "nothing else is due");

        // a new event for a prefix whose step is under way restarts it: the step that read
        // the older generation does not move (or remove) the restarted row
        store("b/");
        let ib = Inbox::new(&db);
        let read = ib.next_expansion(pair).unwrap().expect("b/ is due");
        assert_eq!(read.prefix, "b/");
        store("b/");
        ib.expansion_step(pair, &read, &[], 1, "", true).unwrap();
        let again = ib
            .next_expansion(pair)
            .unwrap()
            .expect("the restarted b/ stays");
        assert_eq!(
            (again.prefix.as_str(), again.phase, again.generation),
            ("b/", 0, read.generation + 1)
        );
    }
}
