//! The compare step of a reconcile: the source's listing, the destination's (or, when the
//! manifest vouches for it, what the manifest recorded there) and the manifest's rows of both
//! sides, all sorted by key, walked side by side (as rclone's `march` walks two listings):
//! each key comes out once, as a [`Row`], in key order. Nothing is held but one page of each;
//! no table is filled with every listed key. A listing that is not in key order is an error
//! naming it (the rows would pair up wrongly).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

use super::plan::Row;
use crate::core::error::{Result, SlateError};
use crate::core::filter::Filter;
use crate::core::object::{Entry, State};
pub use crate::core::range::KeyRange;
use crate::state::blocking;
use crate::state::manifest::{self, Manifest};

/// Manifest rows read per page.
const PAGE: usize = 10_000;

/// One sorted input of the walk.
pub enum Input {
    /// A listing as it streams in, with the filter applied.
    Listing(Box<Listing>),
    /// One side of the manifest, read in pages.
    Recorded(Recorded),
}

/// A listing: entries in key order, those the filter leaves out skipped. A failed entry (a
/// file that cannot be read) is handed to the caller as it comes, and its key is not seen.
pub struct Listing {
    rx: mpsc::Receiver<Result<Entry>>,
    url: String,
    filter: Filter,
    head: Option<(String, State)>,
    last: Option<String>,
    done: bool,
    /// Keys outside it are skipped (a lister may hand back a little more than it was asked).
    range: KeyRange,
    /// Entries that passed the filter.
    pub seen: u64,
}

impl Listing {
    pub fn new(
        rx: mpsc::Receiver<Result<Entry>>,
        url: String,
        filter: Filter,
        range: KeyRange,
    ) -> Listing {
        Listing {
            rx,
            url,
            filter,
            head: None,
            last: None,
            done: false,
            range,
            seen: 0,
        }
    }
}

/// One side of one pair in the manifest, read page by page in key order.
pub struct Recorded {
    db: Arc<Manifest>,
    pair_id: i64,
    side: manifest::Side,
    buf: VecDeque<(String, State)>,
    after: Option<String>,
    done: bool,
}

impl Recorded {
    pub fn new(db: Arc<Manifest>, pair_id: i64, side: manifest::Side) -> Recorded {
        Recorded::from(db, pair_id, side, None)
    }

    /// The rows after the key `after` (None: from the first).
    pub fn from(
        db: Arc<Manifest>,
        pair_id: i64,
        side: manifest::Side,
        after: Option<String>,
    ) -> Recorded {
        Recorded {
            db,
            pair_id,
            side,
            buf: VecDeque::new(),
            after,
            done: false,
        }
    }
}

impl Input {
    /// Reads until the next entry is at hand (or the input is done). Per-entry listing errors
    /// go to `failed` (their key is not seen); a listing out of order is an error.
    async fn fill(&mut self, failed: &mut Vec<SlateError>) -> Result<()> {
        match self {
            Input::Listing(l) => {
                while l.head.is_none() && !l.done {
                    match l.rx.recv().await {
                        None => l.done = true,
                        Some(Err(e @ SlateError::Object { .. })) => failed.push(e),
                        Some(Err(e)) => return Err(e),
                        Some(Ok(e)) => {
                            // the key globs here; the age is the row's business (a source
                            // too old is left out with its destination, see Walk::next)
                            if !l.filter.key(&e.rel) || !l.range.contains(&e.rel) {
                                continue;
                            }
                            if let Some(prev) = &l.last {
                                if e.rel.as_str() <= prev.as_str() {
                                    return Err(SlateError::List {
                                        url: l.url.clone(),
                                        detail: format!(
                                            "listed out of key order ('{}' after '{prev}'): slate compares sorted listings",
                                            e.rel
                                        ),
                                    });
                                }
                            }
                            l.seen += 1;
                            let state = State::of(&e);
                            l.last = Some(e.rel.clone());
                            l.head = Some((e.rel, state));
                        }
                    }
                }
            }
            Input::Recorded(r) => {
                if r.buf.is_empty() && !r.done {
                    let (db, id, side, after) = (r.db.clone(), r.pair_id, r.side, r.after.clone());
                    let page = blocking(move || {
                        db.side_page(
                            id,
                            side,
                            after.as_deref().unwrap_or(""),
                            after.is_none(),
                            PAGE,
                        )
                    })
                    .await?;
                    r.done = page.len() < PAGE;
                    if let Some((k, _)) = page.last() {
                        r.after = Some(k.clone());
                    }
                    r.buf.extend(page);
                }
            }
        }
        Ok(())
    }

    /// The key of the entry at hand.
    fn head(&self) -> Option<&str> {
        match self {
            Input::Listing(l) => l.head.as_ref().map(|(k, _)| k.as_str()),
            Input::Recorded(r) => r.buf.front().map(|(k, _)| k.as_str()),
        }
    }

    /// Takes the entry at hand if its key is `key`.
    fn take_if(&mut self, key: &str) -> Option<State> {
        if self.head() != Some(key) {
            return None;
        }
        match self {
            Input::Listing(l) => l.head.take().map(|(_, s)| s),
            Input::Recorded(r) => r.buf.pop_front().map(|(_, s)| s),
        }
    }

    /// Entries of a listing that passed the filter (0 for the manifest).
    pub fn seen(&self) -> u64 {
        match self {
            Input::Listing(l) => l.seen,
            Input::Recorded(_) => 0,
        }
    }
}

/// The four inputs of a compare, walked side by side.
pub struct Walk {
    pub src: Input,
    pub dst: Input,
    m_src: Input,
    m_dst: Input,
    /// Filters the keys no listing showed (listings are filtered already).
    filter: Filter,
    /// The walk ends at the first key beyond it.
    range: KeyRange,
    now: SystemTime,
}

impl Walk {
    pub fn new(src: Input, dst: Input, m_src: Recorded, m_dst: Recorded, filter: Filter) -> Walk {
        Walk {
            src,
            dst,
            m_src: Input::Recorded(m_src),
            m_dst: Input::Recorded(m_dst),
            filter,
            range: KeyRange::all(),
            now: SystemTime::now(),
        }
    }

    /// Walks only the keys of `range` (the inputs start after its `after` already).
    pub fn within(mut self, range: KeyRange) -> Walk {
        self.range = range;
        self
    }

    /// The next key's row, or None at the end. Keys neither side holds now (only the
    /// manifest remembers them) come out too, with `src` and `dst` both None: the caller
    /// forgets them. `failed` collects entries a listing could not read.
    pub async fn next(&mut self, failed: &mut Vec<SlateError>) -> Result<Option<Row>> {
        loop {
            self.src.fill(failed).await?;
            self.dst.fill(failed).await?;
            self.m_src.fill(failed).await?;
            self.m_dst.fill(failed).await?;
            let Some(key) = [
                self.src.head(),
                self.dst.head(),
                self.m_src.head(),
                self.m_dst.head(),
            ]
            .into_iter()
            .flatten()
            .min()
            .map(str::to_string) else {
                return Ok(None);
            };
            if self.range.beyond(&key) {
                return Ok(None);
            }
            let row = Row {
                src: self.src.take_if(&key),
                dst: self.dst.take_if(&key),
                m_src: self.m_src.take_if(&key),
                m_dst: self.m_dst.take_if(&key),
                key,
            };
            // keys only the manifest named are filtered by key here (listings were already);
            // the age is the source's: now if listed, else as last recorded (a destination's
            // own times say when it was written, not when the source changed)
            if !self.filter.key(&row.key) {
                continue;
            }
            let mtime = row
                .src
                .as_ref()
                .or(row.m_src.as_ref())
                .and_then(|s| s.mtime_ms);
            let t = mtime.map(|ms| UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64));
            let canary = crate::core::canary::is_canary(&row.key);
            if !canary && !self.filter.age(t, self.now) {
                continue;
            }
            // the source's size (now, else as recorded), else the destination's: a key is in or
            // out of a size filter as a whole (rclone filters each side by its own size, so a
            // destination copy of another size can fall out where slate keeps comparing it)
            let size = row
                .src
                .as_ref()
                .or(row.m_src.as_ref())
                .or(row.dst.as_ref())
                .map(|s| s.size);
            if !canary && !self.filter.size(size) {
                continue;
            }
            return Ok(Some(row));
        }
    }
}
