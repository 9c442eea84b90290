//! Azure Blob Storage's change feed as an event source (`changefeed://ACCOUNT`).
//!
//! Azure keeps an ordered, durable log of an account's blob changes in the container
//! `$blobchangefeed`:
//!
//! - `idx/segments/YYYY/MM/DD/HHMM/meta.json`: one manifest per segment (an hour of changes):
//!   its `status` (`Finalized` once complete) and `chunkFilePaths`, the folders of its shards
//!   (`$blobchangefeed/log/NN/YYYY/MM/DD/HHMM/`);
//! - in each shard folder, chunk files `00000.avro`, `00001.avro`, … (Avro object container
//!   files, appended to while the segment is open), one record per change: `eventType`
//!   (`BlobCreated`, `BlobDeleted`, `BlobPropertiesUpdated`, …), `subject`
//!   (`/blobServices/default/containers/C/blobs/NAME`), `eventTime`, `id` and `data` (`etag`,
//!   `contentLength`, `sequencer`, …).
//!
//! The source reads segment after segment, shard after shard, chunk after chunk, and hands out
//! each chunk's records as messages. Its [`Cursor`] (the segment, and per shard the chunk and
//! how many of its records were taken) is stored in the transaction that stores the events of
//! the records before it ([`Source::checkpoint`]), so a daemon killed at any moment resumes at
//! the first record whose events were not stored. A re-read of a record stored already (a
//! batch whose transaction failed) only repeats an upsert or a delete, which the engine
//! decides again from the stores.
//!
//! Unlike Event Grid, the feed records Set Blob Metadata and Set Blob Properties
//! (`BlobPropertiesUpdated`): they reach the replica as upserts, which the engine applies as
//! metadata-only updates when the bytes are unchanged.
//!
//! Records of containers no pair follows are counted as ignored (the whole account's changes
//! are in the feed), never dead-lettered.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::TryStreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::route::Fanout;
use super::source::{Message, Source};
use super::{ChangeEvent, EventKind, Parsed, Token};
use crate::core::error::{Result, SlateError};
use crate::core::location::Location;
use crate::state::inbox::Inbox;
use crate::state::manifest::Manifest;

/// The container Azure writes the feed to.
pub const CONTAINER: &str = "$blobchangefeed";

/// Where segment manifests are listed.
const SEGMENTS: &str = "idx/segments/";

/// Records handed out at once at most.
const BATCH: usize = 500;

/// How often the feed is looked at again once everything in it is read.
const POLL: Duration = Duration::from_secs(10);

/// Where the feed was read to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The segment being read: its manifest (`idx/segments/…/meta.json`); empty: the first
    /// segment that appears.
    pub segment: String,
    /// Per shard folder of the segment (`log/NN/…/`): the chunk being read and how many of
    /// its records were taken.
    #[serde(default)]
    pub shards: BTreeMap<String, ShardPos>,
}

/// A shard's position: records taken of `chunk` (the chunks before it are done).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardPos {
    pub chunk: String,
    pub records: u64,
}

/// A segment's manifest, as far as the reader needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub finalized: bool,
    /// Shard folders, relative to the container, each ending with `/`.
    pub shards: Vec<String>,
}

/// Reads a segment's `meta.json`.
pub fn parse_segment(text: &str) -> std::result::Result<Segment, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let status = v.get("status").and_then(Value::as_str).ok_or("no status")?;
    let paths = v
        .get("chunkFilePaths")
        .and_then(Value::as_array)
        .ok_or("no chunkFilePaths")?;
    let mut shards = Vec::with_capacity(paths.len());
    for p in paths {
        let p = p.as_str().ok_or("a chunkFilePaths entry is not a string")?;
        let rel = p
            .strip_prefix(CONTAINER)
            .map(|r| r.trim_start_matches('/'))
            .unwrap_or(p);
        if rel.is_empty() || rel.contains("..") {
            return Err(format!(
                "chunkFilePaths entry {p:?} is not a folder of the feed"
            ));
        }
        let mut rel = rel.to_string();
        if !rel.ends_with('/') {
            rel.push('/');
        }
        shards.push(rel);
    }
    Ok(Segment {
        finalized: status.eq_ignore_ascii_case("Finalized"),
        shards,
    })
}

/// `meta/segments.json`'s `lastConsumable`, for the log.
fn last_consumable(text: &str) -> Option<String> {
    let v: Value = serde_json::from_str(text).ok()?;
    v.get("lastConsumable")?.as_str().map(str::to_string)
}

/// What one record of the feed means for the pairs: `followed` says whether a pair follows a
/// container. Upserts: `BlobCreated`, `BlobPropertiesUpdated` (Set Blob Metadata/Properties)
/// and `BlobTierChanged`; deletes: `BlobDeleted`; the rest (snapshots, asynchronous copies
/// begun, restore points) changes no current blob. A record of a container no pair follows
/// is ignored.
pub fn record_event(
    v: &Value,
    followed: &dyn Fn(&str) -> bool,
) -> std::result::Result<Parsed, String> {
    let kind = match v.get("eventType").and_then(Value::as_str) {
        Some("BlobCreated" | "BlobPropertiesUpdated" | "BlobTierChanged") => EventKind::Upsert,
        Some("BlobDeleted") => EventKind::Delete,
        Some(_) => return Ok(Parsed::Ignore("changefeed: event type not handled")),
        None => return Err("changefeed record: no eventType".into()),
    };
    let (bucket, key) =
        super::eventgrid::subject_blob(v, "").map_err(|e| format!("changefeed record: {e}"))?;
    if !followed(&bucket) {
        return Ok(Parsed::Ignore("changefeed: a container no pair follows"));
    }
    let data = v.get("data");
    let text = |name: &str| {
        data.and_then(|d| d.get(name))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    Ok(Parsed::Events(vec![ChangeEvent {
        bucket,
        key,
        kind,
        etag: text("etag"),
        size: data
            .and_then(|d| d.get("contentLength"))
            .and_then(Value::as_u64),
        sequencer: text("sequencer").map(Token::EventGrid),
        event_time: v
            .get("eventTime")
            .and_then(Value::as_str)
            .map(str::to_string),
        id: v.get("id").and_then(Value::as_str).map(str::to_string),
    }]))
}

/// Decodes a chunk file: every record as JSON. A chunk of a segment still open may end in a
/// block being written: its records up to there are returned with `torn` set.
///
/// A chunk just created (empty, or not yet a whole header) is torn with no records. A record
/// that decodes but cannot be read as JSON becomes `{"undecodable": why}`, which
/// [`record_event`] refuses: a dead letter, not a feed stuck on it.
pub fn decode_chunk(bytes: &[u8]) -> (Vec<Value>, bool) {
    let Ok(reader) = apache_avro::Reader::new(bytes) else {
        return (Vec::new(), true);
    };
    let mut out = Vec::new();
    for r in reader {
        match r {
            Ok(v) => out.push(
                Value::try_from(v)
                    .unwrap_or_else(|e| serde_json::json!({ "undecodable": e.to_string() })),
            ),
            Err(_) => return (out, true),
        }
    }
    (out, false)
}

/// `changefeed://ACCOUNT[?poll=DURATION]`: the account and how often to look again.
pub fn parse_spec(spec: &str) -> std::result::Result<(String, Duration), String> {
    let rest = spec
        .strip_prefix("changefeed://")
        .ok_or("expected changefeed://ACCOUNT")?;
    let (account, query) = rest.split_once('?').unwrap_or((rest, ""));
    let account = account.trim_end_matches('/');
    if account.is_empty() || !account.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(
            "the account is 3-24 lowercase letters and digits (changefeed://ACCOUNT)".into(),
        );
    }
    let mut poll = POLL;
    for kv in query.split('&').filter(|s| !s.is_empty()) {
        match kv.split_once('=') {
            Some(("poll", v)) => {
                poll = crate::core::filter::parse_age(v).map_err(|e| format!("poll: {e}"))?;
            }
            _ => {
                return Err(format!(
                    "unknown parameter {kv:?} (changefeed://ACCOUNT?poll=10s)"
                ))
            }
        }
    }
    Ok((account.to_string(), poll))
}

/// The segment a feed without a cursor is read from: the newest when the pairs were never
/// reconciled (`since` None: their backfill covers what came before), else the one holding
/// the hour before the oldest last reconcile (or the oldest kept). "" for an empty feed.
pub fn start_segment(segments: &[String], since: Option<i64>) -> String {
    let Some(ms) = since else {
        return segments.last().cloned().unwrap_or_default();
    };
    let Some(t) = chrono::DateTime::from_timestamp_millis(ms - 3_600_000) else {
        return segments.first().cloned().unwrap_or_default();
    };
    let at = format!("{SEGMENTS}{}/meta.json", t.format("%Y/%m/%d/%H00"));
    segments
        .iter()
        .rev()
        .find(|s| **s <= at)
        .or(segments.first())
        .cloned()
        .unwrap_or_default()
}

/// The name a feed's cursor and lease go by: `changefeed://ACCOUNT`, whatever `?poll=`.
pub fn feed_key(account: &str) -> String {
    format!("changefeed://{account}")
}

/// A record read and not yet handed out: its JSON, and the shard position after it.
struct Pending {
    record: Value,
    shard: String,
    chunk: String,
    after: u64,
}

/// The change feed of one account, read from the cursor stored under `spec`.
pub struct ChangeFeedSource {
    spec: String,
    store: Arc<dyn ObjectStore>,
    fanout: Arc<Fanout>,
    poll: Duration,
    /// Stored with the last batch whose events were stored.
    committed: Cursor,
    /// After the last record handed out.
    handed: Cursor,
    /// Where reading goes on (after the records in `pending`).
    read: Cursor,
    pending: VecDeque<Pending>,
    /// Chunks read to their end, by size when read: one not grown is not fetched again.
    done: BTreeMap<String, u64>,
    /// The cursor's segment was gone (the feed's retention removed it before it was read to
    /// its end): the segment gone and the one reading went on from. Changes between are
    /// lost to the feed, so every followed container is reconciled whole.
    gap: Option<(String, String)>,
}

impl ChangeFeedSource {
    /// Opens the feed of the account of `src` (an `az://` location: its credentials, which
    /// must reach `$blobchangefeed`), feeding `fanout`. The feed is read once here (credentials
    /// that cannot fail the start); where reading starts is [`ChangeFeedSource::load_cursor`]'s.
    pub async fn connect(
        spec: &str,
        src: &Location,
        fanout: Arc<Fanout>,
    ) -> Result<ChangeFeedSource> {
        let bad = |why: String| SlateError::BadOption {
            option: "--events".into(),
            why: format!("{spec}: {why}"),
        };
        let (account, poll) = parse_spec(spec).map_err(bad)?;
        let mut loc = src.clone();
        loc.bucket = CONTAINER.into();
        loc.prefix = String::new();
        let (b, _) = crate::stores::azure_builder(&loc)?;
        let named = b
            .get_config_value(&object_store::azure::AzureConfigKey::AccountName)
            .unwrap_or_else(|| "devstoreaccount1".into());
        if named != account {
            return Err(bad(format!(
                "{src} is in the account {named}, not {account}"
            )));
        }
        let store = crate::stores::build_paged(&loc)?.store;
        let err = |e: String| SlateError::Store {
            url: format!("{spec} ({CONTAINER})"),
            detail: e,
        };
        // the feed must be readable now: a container SAS of the pair's container is not enough
        let first = store
            .list_with_delimiter(Some(&StorePath::from("meta")))
            .await
            .map_err(|e| err(format!("cannot read the change feed (is it enabled, and do the credentials reach {CONTAINER}?): {e}")))?;
        drop(first);
        Ok(ChangeFeedSource {
            spec: feed_key(&account),
            store,
            fanout,
            poll,
            committed: Cursor::default(),
            handed: Cursor::default(),
            read: Cursor::default(),
            pending: VecDeque::new(),
            done: BTreeMap::new(),
            gap: None,
        })
    }

    /// Reads the stored cursor and goes on from there: called by the worker that has just
    /// taken the feed's lease, so that it starts where the last reader's stored events end.
    /// Without one, the newest segment is the start (the backfill covers what came before),
    /// stored at once unless another worker stored one first.
    pub async fn load_cursor(&mut self, db: &Arc<Manifest>) -> Result<()> {
        let spec = self.spec.clone();
        let err = |e: String| SlateError::Store {
            url: format!("{spec} ({CONTAINER})"),
            detail: e,
        };
        let (d, k) = (db.clone(), self.spec.clone());
        let mut stored = crate::state::blocking(move || Inbox::new(&d).feed_cursor(&k)).await?;
        if stored.is_none() {
            // a pair never reconciled gets a backfill at its start, which covers what came
            // before the newest segment; a pair reconciled before (one that followed another
            // source until now) does not, so the feed is read from its last reconcile on
            let ids: Vec<i64> = self.fanout.targets().iter().map(|t| t.pair_id).collect();
            let m = db.clone();
            let since = crate::state::blocking(move || {
                let mut oldest: Option<i64> = None;
                for id in ids {
                    if let Some(t) = m.last_sync_of(id)? {
                        oldest = Some(oldest.map_or(t, |o| o.min(t)));
                    }
                }
                Ok(oldest)
            })
            .await?;
            let all = self.segments("").await?;
            let first = start_segment(&all, since);
            tracing::info!(feed = %self.spec, segment = %first,
                since_ms = since.unwrap_or_default(),
                "change feed: no cursor yet; reading from the newest segment, or from the one of the pairs' last reconcile");
            let start = Cursor {
                segment: first,
                shards: BTreeMap::new(),
            };
            let text = serde_json::to_string(&start).map_err(|e| err(e.to_string()))?;
            // stored at once: a restart before the first record reads on from here, not from
            // the newest segment of its own start (which would skip what came between)
            let (d, k) = (db.clone(), self.spec.clone());
            stored = Some(
                crate::state::blocking(move || Inbox::new(&d).init_feed_cursor(&k, &text)).await?,
            );
        }
        let text = stored.unwrap_or_default();
        let cursor: Cursor = serde_json::from_str(&text)
            .map_err(|e| err(format!("the stored cursor is not readable ({e}): {text}")))?;
        if let Ok(meta) = self.get_text("meta/segments.json").await {
            tracing::info!(feed = %self.spec, segment = %cursor.segment,
                last_consumable = last_consumable(&meta).unwrap_or_default(),
                "change feed: reading on from the cursor");
        }
        self.pending.clear();
        self.done.clear();
        self.committed = cursor.clone();
        self.handed = cursor.clone();
        self.read = cursor;
        Ok(())
    }

    fn store_err(&self, e: impl std::fmt::Display) -> SlateError {
        SlateError::Store {
            url: format!("{} ({CONTAINER})", self.spec),
            detail: e.to_string(),
        }
    }

    /// The segment manifests from `from` on (every one when empty), oldest first, without
    /// the placeholder Azure makes when the feed is enabled (`idx/segments/1601/…`, always
    /// empty). Listed from the cursor on, so that a feed of years costs no more per look than
    /// one of hours.
    async fn segments(&self, from: &str) -> Result<Vec<String>> {
        let prefix = StorePath::from(SEGMENTS);
        let listing = if from.is_empty() {
            self.store.list(Some(&prefix))
        } else {
            self.store
                .list_with_offset(Some(&prefix), &StorePath::from(from))
        };
        let mut out: Vec<String> = listing
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .map_err(|e| self.store_err(e))?;
        out.retain(|p| p.ends_with("/meta.json") && !p.starts_with("idx/segments/1601/"));
        out.sort();
        Ok(out)
    }

    /// Whether the manifest `path` is still there (a segment the feed's retention removed is
    /// not).
    async fn exists(&self, path: &str) -> Result<bool> {
        match self.store.head(&StorePath::from(path)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.store_err(e)),
        }
    }

    async fn get_text(&self, path: &str) -> Result<String> {
        let bytes = self.get(path).await?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.store_err(format!("{path}: not UTF-8")))
    }

    async fn get(&self, path: &str) -> Result<bytes::Bytes> {
        let r = self
            .store
            .get_opts(&StorePath::from(path), object_store::GetOptions::default())
            .await
            .map_err(|e| self.store_err(format!("{path}: {e}")))?;
        r.bytes()
            .await
            .map_err(|e| self.store_err(format!("{path}: {e}")))
    }

    /// Chunk files of a shard folder with their sizes, in order.
    async fn chunks(&self, shard: &str) -> Result<Vec<(String, u64)>> {
        let mut out: Vec<(String, u64)> = self
            .store
            .list(Some(&StorePath::from(shard.trim_end_matches('/'))))
            .map_ok(|m| (m.location.to_string(), m.size))
            .try_collect()
            .await
            .map_err(|e| self.store_err(e))?;
        out.retain(|(p, _)| p.ends_with(".avro"));
        out.sort();
        Ok(out)
    }

    /// Reads on from `self.read` until some records are pending or the feed is read to its
    /// end for now. Moves `self.read` past finished segments.
    async fn fill(&mut self) -> Result<()> {
        loop {
            let mut segments = self.segments(&self.read.segment).await?;
            if !self.read.segment.is_empty() && self.exists(&self.read.segment).await? {
                segments.insert(0, self.read.segment.clone());
            }
            // the segment to read: the cursor's, or the first after it when it is gone
            let seg = if self.read.segment.is_empty() {
                match segments.first() {
                    Some(s) => s.clone(),
                    None => return Ok(()),
                }
            } else if segments.contains(&self.read.segment) {
                self.read.segment.clone()
            } else {
                match segments.iter().find(|s| **s > self.read.segment) {
                    Some(s) => {
                        tracing::warn!(feed = %self.spec, gone = %self.read.segment, next = %s,
                            "change feed: the cursor's segment is gone (the feed's retention?); \
                             reading on from the next, and every followed container is reconciled whole");
                        self.gap = Some((self.read.segment.clone(), s.clone()));
                        s.clone()
                    }
                    None => return Ok(()),
                }
            };
            if seg != self.read.segment {
                self.read = Cursor {
                    segment: seg.clone(),
                    shards: BTreeMap::new(),
                };
            }
            let manifest = self.get_text(&seg).await?;
            let segment =
                parse_segment(&manifest).map_err(|e| self.store_err(format!("{seg}: {e}")))?;
            // a shard stopped at a chunk still being written: the segment is not done
            let mut waiting = false;
            for shard in &segment.shards {
                let pos = self.read.shards.get(shard).cloned().unwrap_or_default();
                for (chunk, size) in self.chunks(shard).await? {
                    if !pos.chunk.is_empty() && chunk < pos.chunk {
                        continue; // read before
                    }
                    if self.done.get(&chunk) == Some(&size) {
                        continue; // read to its end, not grown since
                    }
                    let taken = if chunk == pos.chunk { pos.records } else { 0 };
                    let bytes = self.get(&chunk).await?;
                    let (records, torn) = decode_chunk(&bytes);
                    if torn && segment.finalized {
                        return Err(self.store_err(format!(
                            "{chunk}: a damaged block after {} records of a finalized segment",
                            records.len()
                        )));
                    }
                    if !torn {
                        self.done.insert(chunk.clone(), size);
                    }
                    let total = records.len() as u64;
                    if total > taken {
                        for (i, record) in records.into_iter().enumerate().skip(taken as usize) {
                            self.pending.push_back(Pending {
                                record,
                                shard: shard.clone(),
                                chunk: chunk.clone(),
                                after: i as u64 + 1,
                            });
                        }
                        self.read.shards.insert(
                            shard.clone(),
                            ShardPos {
                                chunk: chunk.clone(),
                                records: total,
                            },
                        );
                        return Ok(());
                    }
                    if torn {
                        // its end is still being written: this shard waits here (a later
                        // chunk is not read before this one is whole)
                        waiting = true;
                        break;
                    }
                    // nothing new here: the shard's position moves to this chunk's end
                    self.read.shards.insert(
                        shard.clone(),
                        ShardPos {
                            chunk,
                            records: total.max(taken),
                        },
                    );
                }
            }
            // every shard read to its end: on to the next segment once this one is final
            let next = segments.iter().find(|s| **s > seg);
            match (segment.finalized && !waiting, next) {
                (true, Some(next)) => {
                    self.read = Cursor {
                        segment: next.clone(),
                        shards: BTreeMap::new(),
                    };
                    self.done.clear();
                    if self.pending.is_empty() {
                        // the move is worth storing: a restart skips this segment
                        self.handed = self.read.clone();
                        return Ok(());
                    }
                }
                _ => return Ok(()),
            }
        }
    }
}

#[async_trait]
impl Source for ChangeFeedSource {
    type Ack = ();

    fn name(&self) -> &'static str {
        "changefeed"
    }

    fn spec(&self) -> &str {
        &self.spec
    }

    async fn next_batch(&mut self) -> Result<Vec<Message<()>>> {
        if self.pending.is_empty() && self.gap.is_none() {
            let before = self.handed.clone();
            self.fill().await?;
            if self.pending.is_empty() && self.gap.is_none() {
                if self.handed == before {
                    tokio::time::sleep(self.poll).await;
                }
                return Ok(Vec::new());
            }
        }
        let targets = self.fanout.targets();
        let followed = |c: &str| targets.iter().any(|t| t.scope.bucket == c);
        let mut out = Vec::new();
        if let Some((gone, next)) = self.gap.take() {
            // stored with the cursor at the start of the next segment: a reconcile of each
            // followed container, whole (the engine lists both sides: creates and deletes)
            let mut containers: Vec<String> =
                targets.iter().map(|t| t.scope.bucket.clone()).collect();
            containers.sort();
            containers.dedup();
            self.handed = Cursor {
                segment: self.read.segment.clone(),
                shards: BTreeMap::new(),
            };
            for c in containers {
                out.push(Message {
                    raw: serde_json::to_vec(&serde_json::json!({
                        "slate": "change feed segment gone: the container is reconciled whole",
                        "gone": gone, "next": next, "container": c,
                    }))
                    .unwrap_or_default(),
                    decoded: None,
                    parsed: Ok(Parsed::PrefixReconcile {
                        bucket: c,
                        prefix: String::new(),
                    }),
                    ack: (),
                });
            }
        }
        while out.len() < BATCH {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            let raw = serde_json::to_vec(&p.record).unwrap_or_default();
            let parsed = record_event(&p.record, &followed);
            self.handed.segment = self.read.segment.clone();
            self.handed.shards.insert(
                p.shard,
                ShardPos {
                    chunk: p.chunk,
                    records: p.after,
                },
            );
            out.push(Message {
                raw,
                decoded: None,
                parsed,
                ack: (),
            });
        }
        Ok(out)
    }

    async fn ack(&mut self, _acks: Vec<()>) -> usize {
        self.committed = self.handed.clone();
        0
    }

    async fn nack(&mut self, _acks: Vec<()>) {
        // read again from what was stored last
        self.pending.clear();
        self.done.clear();
        self.handed = self.committed.clone();
        self.read = self.committed.clone();
    }

    fn checkpoint(&self) -> Option<(String, String)> {
        if self.handed == self.committed {
            return None;
        }
        serde_json::to_string(&self.handed)
            .ok()
            .map(|c| (self.spec.clone(), c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_become_events_of_followed_containers() {
        let rec = |t: &str, subject: &str| {
            json!({"schemaVersion": 4, "topic": "/subscriptions/x/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/acct",
                "subject": subject, "eventType": t, "eventTime": "2026-12-01T10:00:00.1234567Z",
                "id": "e1", "data": {"api": "PutBlob", "etag": "0x8D", "contentLength": 5,
                "sequencer": "00000000000000010000000000000002000000000000001f", "blobType": "BlockBlob"}})
        };
        let followed = |c: &str| c == "src";
        let table: &[(&str, &str, Option<EventKind>)] = &[
            (
                "BlobCreated",
                "/blobServices/default/containers/src/blobs/a/b.txt",
                Some(EventKind::Upsert),
            ),
            (
                "BlobPropertiesUpdated",
                "/blobServices/default/containers/src/blobs/m",
                Some(EventKind::Upsert),
            ),
            (
                "BlobTierChanged",
                "/blobServices/default/containers/src/blobs/t",
                Some(EventKind::Upsert),
            ),
            (
                "BlobDeleted",
                "/blobServices/default/containers/src/blobs/d",
                Some(EventKind::Delete),
            ),
            (
                "BlobSnapshotCreated",
                "/blobServices/default/containers/src/blobs/s",
                None,
            ),
            (
                "BlobAsyncOperationInitiated",
                "/blobServices/default/containers/src/blobs/c",
                None,
            ),
            (
                "RestorePointMarkerCreated",
                "/blobServices/default/containers/src/blobs/r",
                None,
            ),
            (
                "BlobCreated",
                "/blobServices/default/containers/other/blobs/x",
                None,
            ),
        ];
        for (t, subject, want) in table {
            let got = record_event(&rec(t, subject), &followed).unwrap();
            match (want, got) {
                (Some(kind), Parsed::Events(evs)) => {
                    assert_eq!(evs.len(), 1, "{t}");
                    let e = &evs[0];
                    assert_eq!(e.kind, *kind, "{t}");
                    assert_eq!(e.bucket, "src");
                    assert!(
                        subject.ends_with(&format!("/blobs/{}", e.key)),
                        "{t}: {}",
                        e.key
                    );
                    assert_eq!(e.etag.as_deref(), Some("0x8D"));
                    assert_eq!(e.size, Some(5));
                    assert!(matches!(&e.sequencer, Some(Token::EventGrid(s)) if s.ends_with("1f")));
                    assert_eq!(
                        e.event_time.as_deref(),
                        Some("2026-12-01T10:00:00.1234567Z")
                    );
                }
                (None, Parsed::Ignore(_)) => {}
                (w, g) => panic!("{t} {subject}: wanted {w:?}, got {g:?}"),
            }
        }
        // malformed records are errors (dead letters), not silently dropped
        assert!(record_event(&json!({"subject": "/x"}), &followed).is_err());
        assert!(record_event(
            &json!({"eventType": "BlobCreated", "subject": "/nope"}),
            &followed
        )
        .is_err());
    }

    #[test]
    fn segment_manifests_name_their_shards() {
        let text = r#"{"version":0,"begin":"2026-12-01T10:00:00.000Z","intervalSecs":3600,
            "status":"Finalized","config":{"version":0},
            "chunkFilePaths":["$blobchangefeed/log/00/2026/12/01/1000/","$blobchangefeed/log/01/2026/12/01/1000"]}"#;
        let s = parse_segment(text).unwrap();
        assert!(s.finalized);
        assert_eq!(
            s.shards,
            vec!["log/00/2026/12/01/1000/", "log/01/2026/12/01/1000/"]
        );
        let open = parse_segment(&text.replace("Finalized", "Publishing")).unwrap();
        assert!(!open.finalized);
        assert!(parse_segment("{}").is_err());
        assert!(parse_segment(
            r#"{"status":"Finalized","chunkFilePaths":["$blobchangefeed/../x"]}"#
        )
        .is_err());
    }

    #[test]
    fn specs_name_an_account_and_a_poll() {
        assert_eq!(
            parse_spec("changefeed://acct").unwrap(),
            ("acct".to_string(), POLL)
        );
        assert_eq!(
            parse_spec("changefeed://acct?poll=200ms").unwrap().1,
            Duration::from_millis(200)
        );
        for bad in [
            "changefeed://",
            "changefeed://a/b",
            "azqueue://a/q",
            "changefeed://a?x=1",
        ] {
            assert!(parse_spec(bad).is_err(), "{bad}");
        }
    }

    /// A feed in memory for the reader: chunk files of records naming blobs of `src`.
    mod reader {
        use super::super::*;
        use crate::events::route::{IntakeStats, Scope, Target};
        use crate::state::db::Location as DbLocation;
        use object_store::memory::InMemory;
        use object_store::PutPayload;

        const SCHEMA: &str = r#"{"type": "record", "name": "R", "fields": [
            {"name": "eventType", "type": "string"}, {"name": "subject", "type": "string"},
            {"name": "data", "type": {"type": "record", "name": "D", "fields": [
                {"name": "sequencer", "type": "string"}]}}]}"#;

        /// An Avro chunk of creates of `names`.
        fn chunk(names: &[&str]) -> Vec<u8> {
            use apache_avro::types::Value as A;
            let schema = apache_avro::Schema::parse_str(SCHEMA).unwrap();
            let mut w = apache_avro::Writer::new(&schema, Vec::new());
            for (i, n) in names.iter().enumerate() {
                w.append(A::Record(vec![
                    ("eventType".into(), A::String("BlobCreated".into())),
                    (
                        "subject".into(),
                        A::String(format!("/blobServices/default/containers/src/blobs/{n}")),
                    ),
                    (
                        "data".into(),
                        A::Record(vec![("sequencer".into(), A::String(format!("{i:04}")))]),
                    ),
                ]))
                .unwrap();
                // a block per record, so that a cut can fall between records
                w.flush().unwrap();
            }
            w.into_inner().unwrap()
        }

        struct Feed {
            store: Arc<InMemory>,
            source: ChangeFeedSource,
            _dir: tempfile::TempDir,
        }

        impl Feed {
            fn new() -> Feed {
                let dir = tempfile::tempdir().unwrap();
                let db = Arc::new(
                    Manifest::open_at(&DbLocation::Sqlite(dir.path().join("m.db"))).unwrap(),
                );
                let fanout = Fanout::new(db, "az", "changefeed://acct");
                fanout.add(Target {
                    pair_id: 1,
                    scope: Scope {
                        bucket: "src".into(),
                        prefix: String::new(),
                    },
                    stats: Arc::new(IntakeStats::default()),
                });
                let store = Arc::new(InMemory::new());
                let source = ChangeFeedSource {
                    spec: feed_key("acct"),
                    store: store.clone(),
                    fanout,
                    poll: Duration::from_millis(1),
                    committed: Cursor::default(),
                    handed: Cursor::default(),
                    read: Cursor::default(),
                    pending: VecDeque::new(),
                    done: BTreeMap::new(),
                    gap: None,
                };
                Feed {
                    store,
                    source,
                    _dir: dir,
                }
            }

            async fn put(&self, path: &str, bytes: Vec<u8>) {
                self.store
                    .put(&StorePath::from(path), PutPayload::from(bytes))
                    .await
                    .unwrap();
            }

            async fn segment(&self, hour: &str, status: &str, shards: &[&str]) {
                let paths: Vec<String> = shards
                    .iter()
                    .map(|s| format!("$blobchangefeed/log/{s}/2026/12/01/{hour}/"))
                    .collect();
                let meta = serde_json::json!({"status": status, "chunkFilePaths": paths});
                self.put(
                    &format!("idx/segments/2026/12/01/{hour}/meta.json"),
                    meta.to_string().into_bytes(),
                )
                .await;
            }

            /// The keys of the next batch, acknowledged (their store succeeded).
            async fn next(&mut self) -> Vec<String> {
                let batch = self.source.next_batch().await.unwrap();
                let keys = batch
                    .iter()
                    .filter_map(|m| match &m.parsed {
                        Ok(Parsed::Events(e)) => Some(e[0].key.clone()),
                        _ => None,
                    })
                    .collect();
                self.source.ack(vec![(); batch.len()]).await;
                keys
            }
        }

        #[tokio::test]
        async fn shards_chunks_growth_tears_and_segments_are_read_in_order_once() {
            let mut f = Feed::new();
            // the placeholder Azure makes when the feed is enabled is never read
            f.put("idx/segments/1601/01/01/0000/meta.json", b"{}".to_vec())
                .await;
            f.segment("1000", "Publishing", &["00", "01"]).await;
            f.put("log/00/2026/12/01/1000/00000.avro", chunk(&["a", "b", "c"]))
                .await;
            f.put("log/01/2026/12/01/1000/00000.avro", chunk(&["x", "y"]))
                .await;
            assert_eq!(f.next().await, ["a", "b", "c"]);
            assert_eq!(f.next().await, ["x", "y"]);
            assert!(f.next().await.is_empty());
            // a chunk grows: only its new records
            f.put(
                "log/00/2026/12/01/1000/00000.avro",
                chunk(&["a", "b", "c", "d"]),
            )
            .await;
            assert_eq!(f.next().await, ["d"]);
            // a chunk whose end is being written: its whole records, and its shard waits
            // there (the shard's next chunk is not read before it is whole)
            let whole = chunk(&["x", "y", "z", "w"]);
            f.put(
                "log/01/2026/12/01/1000/00000.avro",
                whole[..whole.len() - 5].to_vec(),
            )
            .await;
            f.put("log/01/2026/12/01/1000/00001.avro", chunk(&["next"]))
                .await;
            assert_eq!(f.next().await, ["z"]);
            assert!(f.next().await.is_empty());
            f.put("log/01/2026/12/01/1000/00000.avro", whole).await;
            assert_eq!(f.next().await, ["w"]);
            assert_eq!(f.next().await, ["next"]);
            // a batch whose store failed is read again from what was stored
            f.segment("1100", "Publishing", &["00"]).await;
            f.segment("1000", "Finalized", &["00", "01"]).await;
            f.put("log/00/2026/12/01/1100/00000.avro", chunk(&["e", "f"]))
                .await;
            let moved = f.source.next_batch().await.unwrap();
            assert!(moved.is_empty(), "the move to the next segment comes alone");
            let stored = f.source.checkpoint().expect("the move is stored");
            assert!(stored.1.contains("/1100/"), "{stored:?}");
            f.source.ack(Vec::new()).await;
            let lost = f.source.next_batch().await.unwrap();
            assert_eq!(lost.len(), 2);
            f.source.nack(vec![(); 2]).await;
            assert_eq!(f.next().await, ["e", "f"]);
            assert!(f.next().await.is_empty());
            assert_eq!(f.source.checkpoint(), None);
        }

        #[tokio::test]
        async fn a_segment_removed_before_it_was_read_reconciles_the_containers_whole() {
            let mut f = Feed::new();
            f.segment("1000", "Publishing", &["00"]).await;
            f.put("log/00/2026/12/01/1000/00000.avro", chunk(&["a"]))
                .await;
            assert_eq!(f.next().await, ["a"]);
            // the daemon is down past the feed's retention: its segment goes, records unread
            f.segment("1200", "Finalized", &["00"]).await;
            f.put("log/00/2026/12/01/1200/00000.avro", chunk(&["late"]))
                .await;
            f.store
                .delete(&StorePath::from("idx/segments/2026/12/01/1000/meta.json"))
                .await
                .unwrap();
            let batch = f.source.next_batch().await.unwrap();
            match &batch[0].parsed {
                Ok(Parsed::PrefixReconcile { bucket, prefix }) => {
                    assert_eq!((bucket.as_str(), prefix.as_str()), ("src", ""));
                }
                other => panic!("wanted a reconcile of the container first: {other:?}"),
            }
            assert!(String::from_utf8_lossy(&batch[0].raw).contains("/1000/"));
            // the records of the next segment follow, in the same batch
            let keys: Vec<String> = batch[1..]
                .iter()
                .filter_map(|m| match &m.parsed {
                    Ok(Parsed::Events(e)) => Some(e[0].key.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(keys, ["late"]);
            let stored = f.source.checkpoint().expect("a cursor");
            assert!(stored.1.contains("/1200/"), "{stored:?}");
            f.source.ack(vec![(); batch.len()]).await;
            // once
            assert!(f.next().await.is_empty());
            assert!(f.source.gap.is_none());
        }

        #[test]
        fn an_empty_or_cut_chunk_is_torn_and_a_whole_one_not() {
            assert_eq!(decode_chunk(b""), (Vec::new(), true));
            let c = chunk(&["a", "b"]);
            let (records, torn) = decode_chunk(&c);
            assert_eq!((records.len(), torn), (2, false));
            let (records, torn) = decode_chunk(&c[..c.len() - 3]);
            assert_eq!((records.len(), torn), (1, true));
        }
    }

    #[test]
    fn a_feed_without_a_cursor_starts_where_nothing_is_missed() {
        let segs: Vec<String> = ["2026/12/01/0900", "2026/12/01/1000", "2026/12/01/1100"]
            .iter()
            .map(|h| format!("idx/segments/{h}/meta.json"))
            .collect();
        let ms = |rfc: &str| {
            chrono::DateTime::parse_from_rfc3339(rfc)
                .unwrap()
                .timestamp_millis()
        };
        // never reconciled: the backfill covers the past, the newest segment is the start
        assert_eq!(start_segment(&segs, None), segs[2]);
        // reconciled at 11:20: from the hour before, 10:00
        assert_eq!(
            start_segment(&segs, Some(ms("2026-12-01T11:20:00Z"))),
            segs[1]
        );
        // reconciled before the oldest kept segment: from the oldest
        assert_eq!(
            start_segment(&segs, Some(ms("2026-11-01T00:00:00Z"))),
            segs[0]
        );
        // reconciled after the newest: from the newest
        assert_eq!(
            start_segment(&segs, Some(ms("2026-12-02T00:00:00Z"))),
            segs[2]
        );
        assert_eq!(start_segment(&[], Some(1)), "");
    }

    #[test]
    fn cursors_round_trip_as_json() {
        let mut c = Cursor {
            segment: "idx/segments/2026/12/01/1000/meta.json".into(),
            shards: BTreeMap::new(),
        };
        c.shards.insert(
            "log/00/2026/12/01/1000/".into(),
            ShardPos {
                chunk: "log/00/2026/12/01/1000/00001.avro".into(),
                records: 17,
            },
        );
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<Cursor>(&text).unwrap(), c);
    }
}
