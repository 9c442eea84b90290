//! The S3 API over the generated bucket (the source) and the hashing sink.
//!
//! The source is the generated objects plus an overlay of what was written or deleted since
//! (PUT, DELETE, copy, or a change set made through the admin port), merged in key order. The
//! sink keeps of each object only its size, the MD5 of each part (a single PUT is one part),
//! its ETag and metadata: enough to check a replica of millions of objects without holding it.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use s3s::crypto::{Checksum, Md5};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};

use crate::model::{hex, successor, Content, Spec};

/// One stored object of the overlay or the sink.
#[derive(Debug, Clone)]
pub struct Stored {
    pub size: u64,
    pub etag: String,
    pub modified: SystemTime,
    pub meta: Option<Metadata>,
    pub content_type: Option<String>,
    /// The bytes (the source's overlay), or None (the sink keeps hashes).
    pub data: Option<Bytes>,
    /// A generated version (a change set's overwrite or new object): its bytes are made
    /// again from (key, version) when read, not kept.
    pub version: Option<u64>,
    /// Each part's MD5 and size, in order.
    pub parts: Vec<([u8; 16], u64)>,
}

/// What a bucket says of a key.
#[derive(Debug, Clone)]
pub enum Entry {
    Generated(u64),
    Stored(Stored),
}

pub struct Bucket {
    pub gen: Option<Spec>,
    /// Written (Some) or deleted (None) since the bucket was generated.
    pub over: BTreeMap<String, Option<Stored>>,
    /// Keeps the bytes of what is written (the source) or only their hashes (the sink).
    pub keep_bytes: bool,
}

impl Bucket {
    pub fn get(&self, key: &str) -> Option<Entry> {
        if let Some(o) = self.over.get(key) {
            return o.clone().map(Entry::Stored);
        }
        let g = self.gen.as_ref()?;
        let i = g.lower_bound(key);
        (i < g.n && g.key(i) == key).then_some(Entry::Generated(i))
    }

    /// The entries after `after` (exclusive) beginning with `prefix`, in key order, at most
    /// `max`, with `delimiter` folding keys into common prefixes. Returns (objects, common
    /// prefixes, truncated, last key or prefix returned).
    #[allow(clippy::type_complexity)]
    pub fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        delimiter: Option<&str>,
        max: usize,
    ) -> (Vec<(String, Entry)>, Vec<String>, bool, Option<String>) {
        let mut objects = Vec::new();
        let mut prefixes = Vec::new();
        let mut last: Option<String> = None;
        // the next key to look at: the first one past `after`, not before `prefix`
        let mut from: String = match after {
            Some(a) if a >= prefix => format!("{a}\u{0}"),
            _ => prefix.to_string(),
        };
        loop {
            let Some((key, entry)) = self.first_from(&from) else {
                return (objects, prefixes, false, last);
            };
            if !key.starts_with(prefix) {
                return (objects, prefixes, false, last);
            }
            if objects.len() + prefixes.len() == max {
                return (objects, prefixes, true, last);
            }
            let folded = delimiter.filter(|d| !d.is_empty()).and_then(|d| {
                key[prefix.len()..]
                    .find(d)
                    .map(|at| prefix.len() + at + d.len())
            });
            match folded {
                Some(end) => {
                    let cp = key[..end].to_string();
                    from = successor(&cp);
                    last = Some(cp.clone());
                    prefixes.push(cp);
                }
                None => {
                    from = format!("{key}\u{0}");
                    last = Some(key.clone());
                    objects.push((key, entry));
                }
            }
        }
    }

    /// The first live entry whose key is `>= from`.
    fn first_from(&self, from: &str) -> Option<(String, Entry)> {
        let mut g_idx = self.gen.as_ref().map(|g| g.lower_bound(from)).unwrap_or(0);
        let mut over = self
            .over
            .range::<str, _>((Bound::Included(from), Bound::Unbounded));
        let mut o = over.next();
        loop {
            let gk = self
                .gen
                .as_ref()
                .filter(|g| g_idx < g.n)
                .map(|g| g.key(g_idx));
            match (gk, o) {
                (None, None) => return None,
                (Some(gk), None) => return Some((gk, Entry::Generated(g_idx))),
                (gk, Some((ok, ov))) => {
                    let over_first = gk.as_ref().is_none_or(|gk| ok.as_str() <= gk.as_str());
                    if !over_first {
                        let gk = gk.unwrap_or_default();
                        return Some((gk, Entry::Generated(g_idx)));
                    }
                    if gk.as_deref() == Some(ok.as_str()) {
                        g_idx += 1;
                    }
                    match ov {
                        Some(s) => return Some((ok.clone(), Entry::Stored(s.clone()))),
                        // deleted: hides the generated key of the same name
                        None => o = over.next(),
                    }
                }
            }
        }
    }
}

/// An upload under way: its parts' bytes (the source) or only their hashes (the sink).
struct Upload {
    bucket: String,
    key: String,
    meta: Option<Metadata>,
    content_type: Option<String>,
    parts: BTreeMap<i32, ([u8; 16], u64, Option<Bytes>)>,
}

/// The store: cheap to clone, every clone the same store (the S3 service and the admin port).
#[derive(Clone)]
pub struct Synth {
    pub spec: Spec,
    pub src: String,
    pub sink: String,
    pub buckets: Arc<RwLock<HashMap<String, Bucket>>>,
    uploads: Arc<Mutex<HashMap<String, Upload>>>,
    next_upload: Arc<std::sync::atomic::AtomicU64>,
    /// Requests served, by operation (for the benchmark's request counts).
    pub counts: Arc<Mutex<BTreeMap<&'static str, u64>>>,
    /// Where the source's changes are told, as S3 event notifications.
    pub events: Arc<crate::queue::Queue>,
}

fn md5_of(data: &[u8]) -> [u8; 16] {
    let mut h = Md5::new();
    h.update(data);
    h.finalize()
}

/// S3's ETag of an object of these parts: the MD5 of a single PUT, else the MD5 of the parts'
/// MD5s and their count.
pub fn etag_of(parts: &[([u8; 16], u64)], multipart: bool) -> String {
    match (parts, multipart) {
        ([(one, _)], false) => hex(one),
        _ => {
            let mut h = Md5::new();
            for (m, _) in parts {
                h.update(m);
            }
            format!("{}-{}", hex(&h.finalize()), parts.len())
        }
    }
}

impl Synth {
    pub fn new(spec: Spec, src: String, sink: String, events: Arc<crate::queue::Queue>) -> Synth {
        let mut buckets = HashMap::new();
        buckets.insert(
            src.clone(),
            Bucket {
                gen: Some(spec.clone()),
                over: BTreeMap::new(),
                keep_bytes: true,
            },
        );
        buckets.insert(
            sink.clone(),
            Bucket {
                gen: None,
                over: BTreeMap::new(),
                keep_bytes: false,
            },
        );
        Synth {
            spec,
            src,
            sink,
            buckets: Arc::new(RwLock::new(buckets)),
            uploads: Default::default(),
            next_upload: Arc::new(1.into()),
            counts: Default::default(),
            events,
        }
    }

    fn count(&self, op: &'static str) {
        if let Ok(mut c) = self.counts.lock() {
            *c.entry(op).or_default() += 1;
        }
    }

    fn read<T>(&self, f: impl FnOnce(&HashMap<String, Bucket>) -> T) -> S3Result<T> {
        let b = self
            .buckets
            .read()
            .map_err(|_| s3_error!(InternalError, "poisoned"))?;
        Ok(f(&b))
    }

    fn write<T>(&self, f: impl FnOnce(&mut HashMap<String, Bucket>) -> T) -> S3Result<T> {
        let mut b = self
            .buckets
            .write()
            .map_err(|_| s3_error!(InternalError, "poisoned"))?;
        Ok(f(&mut b))
    }

    /// What `bucket` says of `key`, or the S3 error for its absence.
    pub fn lookup(&self, bucket: &str, key: &str) -> S3Result<Entry> {
        self.read(|b| match b.get(bucket) {
            None => Err(s3_error!(NoSuchBucket)),
            Some(b) => b.get(key).ok_or_else(|| s3_error!(NoSuchKey)),
        })?
    }

    /// Size, ETag and time of an entry (a generated object's ETag is the MD5 of its bytes).
    pub fn facts(&self, key: &str, e: &Entry) -> (u64, String, SystemTime) {
        match e {
            Entry::Generated(i) => {
                let size = self.spec.size(*i);
                let c = Content::of(&self.spec, key, 0);
                (
                    size,
                    hex(&c.md5(0, size)),
                    UNIX_EPOCH + Duration::from_secs(self.spec.mtime(*i)),
                )
            }
            Entry::Stored(s) => (s.size, s.etag.clone(), s.modified),
        }
    }

    /// Bytes `start..end` of an entry; None for the sink's objects (no bytes kept).
    fn bytes(&self, key: &str, e: &Entry, start: u64, end: u64) -> Option<Bytes> {
        match e {
            Entry::Generated(_) => {
                let c = Content::of(&self.spec, key, 0);
                let mut out = vec![0u8; (end - start) as usize];
                c.fill(start, &mut out);
                Some(out.into())
            }
            Entry::Stored(s) => match s.version {
                Some(v) => {
                    let c = Content::of(&self.spec, key, v);
                    let mut out = vec![0u8; (end - start) as usize];
                    c.fill(start, &mut out);
                    Some(out.into())
                }
                None => s
                    .data
                    .as_ref()
                    .map(|d| d.slice(start as usize..end as usize)),
            },
        }
    }

    /// Makes version `version` of `key` in the source, `size` bytes generated: a change set's
    /// new object or overwrite.
    pub fn generate(&self, key: &str, version: u64, size: u64) -> S3Result<()> {
        let c = Content::of(&self.spec, key, version);
        let md5 = c.md5(0, size);
        let etag = hex(&md5);
        let stored = Stored {
            size,
            etag: etag.clone(),
            modified: SystemTime::now(),
            meta: None,
            content_type: None,
            data: None,
            version: Some(version),
            parts: vec![(md5, size)],
        };
        self.write(|b| {
            b.get_mut(&self.src)
                .map(|b| b.over.insert(key.to_string(), Some(stored)))
        })?;
        let src = self.src.clone();
        self.told(&src, key, Some((size, &etag)));
        Ok(())
    }

    /// Deletes `key` from the source.
    pub fn delete_source(&self, key: &str) -> S3Result<()> {
        let src = self.src.clone();
        self.remove(&src, key)
    }

    /// Stores an object whose bytes are `data` (kept or only hashed, as the bucket does).
    pub fn put(
        &self,
        bucket: &str,
        key: &str,
        data: Bytes,
        meta: Option<Metadata>,
        content_type: Option<String>,
    ) -> S3Result<String> {
        let parts = vec![(md5_of(&data), data.len() as u64)];
        let etag = etag_of(&parts, false);
        let size = data.len() as u64;
        self.write(|b| {
            let b = b.get_mut(bucket).ok_or_else(|| s3_error!(NoSuchBucket))?;
            let stored = Stored {
                size: data.len() as u64,
                etag: etag.clone(),
                modified: SystemTime::now(),
                meta,
                content_type,
                data: b.keep_bytes.then_some(data),
                version: None,
                parts,
            };
            b.over.insert(key.to_string(), Some(stored));
            Ok::<_, s3s::S3Error>(())
        })??;
        self.told(bucket, key, Some((size, &etag)));
        Ok(etag)
    }

    /// Tells the queue of a change to the source (the sink's are not followed).
    fn told(&self, bucket: &str, key: &str, created: Option<(u64, &str)>) {
        if bucket == self.src {
            self.events.s3_event(bucket, key, created);
        }
    }

    fn remove(&self, bucket: &str, key: &str) -> S3Result<()> {
        self.write(|b| {
            let b = b.get_mut(bucket).ok_or_else(|| s3_error!(NoSuchBucket))?;
            match b.gen.is_some() {
                // a tombstone hides the generated object
                true => b.over.insert(key.to_string(), None),
                false => b.over.remove(key),
            };
            Ok::<_, s3s::S3Error>(())
        })??;
        self.told(bucket, key, None);
        Ok(())
    }
}

async fn collect(body: Option<StreamingBlob>) -> S3Result<Bytes> {
    let Some(mut body) = body else {
        return Ok(Bytes::new());
    };
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| s3_error!(IncompleteBody, "{e}"))?;
        out.extend_from_slice(&chunk);
    }
    Ok(out.into())
}

fn strong(etag: &str) -> ETag {
    ETag::Strong(etag.to_string())
}

#[async_trait::async_trait]
impl S3 for Synth {
    async fn list_buckets(
        &self,
        _: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let names: Vec<String> = self.read(|b| b.keys().cloned().collect())?;
        let buckets = names
            .into_iter()
            .map(|n| Bucket_ {
                name: Some(n),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..Default::default()
        }))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        match self.read(|b| b.contains_key(&req.input.bucket))? {
            true => Ok(S3Response::new(HeadBucketOutput::default())),
            false => Err(s3_error!(NoSuchBucket)),
        }
    }

    async fn get_bucket_location(
        &self,
        _: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        self.count("list");
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        let after = match (&input.continuation_token, &input.start_after) {
            (Some(c), Some(s)) => Some(c.clone().max(s.clone())),
            (Some(c), None) => Some(c.clone()),
            (None, s) => s.clone(),
        };
        let max = input.max_keys.unwrap_or(1000).clamp(0, 1000) as usize;
        let (objects, prefixes, truncated, last) = self
            .read(|b| {
                b.get(&input.bucket)
                    .map(|b| b.list(&prefix, after.as_deref(), input.delimiter.as_deref(), max))
            })?
            .ok_or_else(|| s3_error!(NoSuchBucket))?;
        let contents: Vec<Object> = objects
            .into_iter()
            .map(|(key, e)| {
                let (size, etag, modified) = self.facts(&key, &e);
                Object {
                    key: Some(key),
                    size: Some(size as i64),
                    e_tag: Some(strong(&etag)),
                    last_modified: Some(Timestamp::from(modified)),
                    storage_class: Some(ObjectStorageClass::from_static("STANDARD")),
                    ..Default::default()
                }
            })
            .collect();
        let count = (contents.len() + prefixes.len()) as i32;
        Ok(S3Response::new(ListObjectsV2Output {
            key_count: Some(count),
            max_keys: Some(max as i32),
            is_truncated: Some(truncated),
            contents: (!contents.is_empty()).then_some(contents),
            common_prefixes: (!prefixes.is_empty()).then(|| {
                prefixes
                    .into_iter()
                    .map(|p| CommonPrefix { prefix: Some(p) })
                    .collect()
            }),
            continuation_token: input.continuation_token,
            next_continuation_token: if truncated { last } else { None },
            delimiter: input.delimiter,
            encoding_type: input.encoding_type,
            name: Some(input.bucket),
            prefix: input.prefix,
            start_after: input.start_after,
            ..Default::default()
        }))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        self.count("head");
        let input = req.input;
        let e = self.lookup(&input.bucket, &input.key)?;
        let (size, etag, modified) = self.facts(&input.key, &e);
        let (meta, content_type) = match &e {
            Entry::Stored(s) => (s.meta.clone(), s.content_type.clone()),
            Entry::Generated(_) => (None, None),
        };
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(size as i64),
            e_tag: Some(strong(&etag)),
            last_modified: Some(Timestamp::from(modified)),
            metadata: meta,
            content_type,
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        self.count("get");
        let input = req.input;
        let e = self.lookup(&input.bucket, &input.key)?;
        let (size, etag, modified) = self.facts(&input.key, &e);
        if let Some(ETagCondition::ETag(want)) = &input.if_match {
            if want.value() != etag {
                return Err(s3_error!(PreconditionFailed));
            }
        }
        let (start, end, range) = match &input.range {
            None => (0, size, None),
            Some(r) => {
                let r = r.check(size).map_err(|_| s3_error!(InvalidRange))?;
                let cr = format!("bytes {}-{}/{size}", r.start, r.end.saturating_sub(1));
                (r.start, r.end, Some(cr))
            }
        };
        let data = self
            .bytes(&input.key, &e, start, end)
            .ok_or_else(|| s3_error!(NotImplemented, "the sink keeps hashes, not bytes"))?;
        let (meta, content_type) = match &e {
            Entry::Stored(s) => (s.meta.clone(), s.content_type.clone()),
            Entry::Generated(_) => (None, None),
        };
        let len = data.len() as i64;
        let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(data) });
        Ok(S3Response::new(GetObjectOutput {
            body: Some(StreamingBlob::wrap(stream)),
            content_length: Some(len),
            content_range: range,
            e_tag: Some(strong(&etag)),
            last_modified: Some(Timestamp::from(modified)),
            metadata: meta,
            content_type,
            ..Default::default()
        }))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        self.count("put");
        let input = req.input;
        let data = collect(input.body).await?;
        let etag = self.put(
            &input.bucket,
            &input.key,
            data,
            input.metadata,
            input.content_type,
        )?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(strong(&etag)),
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.count("delete");
        self.remove(&req.input.bucket, &req.input.key)?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        self.count("delete");
        let input = req.input;
        let mut deleted = Vec::new();
        for o in input.delete.objects {
            self.remove(&input.bucket, &o.key)?;
            deleted.push(DeletedObject {
                key: Some(o.key),
                ..Default::default()
            });
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        self.count("copy");
        let input = req.input;
        let CopySource::Bucket { bucket, key, .. } = &input.copy_source else {
            return Err(s3_error!(NotImplemented, "copy from an access point"));
        };
        let e = self.lookup(bucket, key)?;
        let (size, _, _) = self.facts(key, &e);
        let data = self
            .bytes(key, &e, 0, size)
            .ok_or_else(|| s3_error!(NotImplemented, "the sink keeps hashes, not bytes"))?;
        let (meta, ct) = match (&input.metadata_directive, &e) {
            (Some(d), _) if d.as_str() == "REPLACE" => (input.metadata, input.content_type),
            (_, Entry::Stored(s)) => (s.meta.clone(), s.content_type.clone()),
            _ => (None, None),
        };
        let etag = self.put(&input.bucket, &input.key, data, meta, ct)?;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(strong(&etag)),
                last_modified: Some(Timestamp::from(SystemTime::now())),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.count("mpu");
        let input = req.input;
        if !self.read(|b| b.contains_key(&input.bucket))? {
            return Err(s3_error!(NoSuchBucket));
        }
        let id = format!(
            "synth-{}",
            self.next_upload
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let up = Upload {
            bucket: input.bucket.clone(),
            key: input.key.clone(),
            meta: input.metadata,
            content_type: input.content_type,
            parts: BTreeMap::new(),
        };
        self.uploads
            .lock()
            .map_err(|_| s3_error!(InternalError))?
            .insert(id.clone(), up);
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        self.count("part");
        let input = req.input;
        let data = collect(input.body).await?;
        let md5 = md5_of(&data);
        let keep = self.read(|b| {
            let bucket = self
                .uploads
                .lock()
                .ok()
                .and_then(|u| u.get(&input.upload_id).map(|u| u.bucket.clone()));
            bucket.and_then(|n| b.get(&n).map(|b| b.keep_bytes))
        })?;
        let Some(keep) = keep else {
            return Err(s3_error!(NoSuchUpload));
        };
        let mut ups = self.uploads.lock().map_err(|_| s3_error!(InternalError))?;
        let up = ups
            .get_mut(&input.upload_id)
            .ok_or_else(|| s3_error!(NoSuchUpload))?;
        let len = data.len() as u64;
        up.parts
            .insert(input.part_number, (md5, len, keep.then_some(data)));
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(strong(&hex(&md5))),
            ..Default::default()
        }))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let input = req.input;
        let ups = self.uploads.lock().map_err(|_| s3_error!(InternalError))?;
        let up = ups
            .get(&input.upload_id)
            .ok_or_else(|| s3_error!(NoSuchUpload))?;
        let parts = up
            .parts
            .iter()
            .map(|(n, (m, size, _))| Part {
                part_number: Some(*n),
                e_tag: Some(strong(&hex(m))),
                size: Some(*size as i64),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            parts: Some(parts),
            is_truncated: Some(false),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        self.count("complete");
        let input = req.input;
        let up = self
            .uploads
            .lock()
            .map_err(|_| s3_error!(InternalError))?
            .remove(&input.upload_id)
            .ok_or_else(|| s3_error!(NoSuchUpload))?;
        let asked: Vec<i32> = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|p| p.part_number)
            .collect();
        if asked.is_empty() {
            return Err(s3_error!(InvalidPart, "no parts"));
        }
        let mut parts = Vec::new();
        let mut data = Vec::new();
        let mut keep = true;
        for n in &asked {
            let (m, size, bytes) = up.parts.get(n).ok_or_else(|| s3_error!(InvalidPart))?;
            parts.push((*m, *size));
            match bytes {
                Some(b) => data.extend_from_slice(b),
                None => keep = false,
            }
        }
        let etag = etag_of(&parts, true);
        let size = parts.iter().map(|(_, s)| s).sum();
        let stored = Stored {
            size,
            etag: etag.clone(),
            modified: SystemTime::now(),
            meta: up.meta,
            content_type: up.content_type,
            data: keep.then(|| Bytes::from(data)),
            version: None,
            parts,
        };
        self.write(|b| {
            b.get_mut(&up.bucket)
                .map(|b| b.over.insert(up.key.clone(), Some(stored)))
        })?;
        self.told(&up.bucket, &up.key, Some((size, &etag)));
        let (bucket, key) = (up.bucket, up.key);
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(bucket),
            key: Some(key),
            e_tag: Some(strong(&etag)),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.uploads
            .lock()
            .map_err(|_| s3_error!(InternalError))?
            .remove(&req.input.upload_id);
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }
}

/// A `Bucket` of s3s' DTOs (named apart from this module's own bucket).
type Bucket_ = s3s::dto::Bucket;

/// Checks the replica of `src_prefix` at `sink_prefix`: every live source object is in the
/// sink with its size and the MD5 of each part its bytes were sent in; nothing else is there.
pub fn verify(s: &Synth, src_prefix: &str, sink_prefix: &str) -> serde_json::Value {
    let (mut objects, mut bytes, mut same, mut differ, mut missing, mut extra) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut examples: Vec<String> = Vec::new();
    let note = |what: &str, key: &str, examples: &mut Vec<String>| {
        if examples.len() < 10 {
            examples.push(format!("{what}: {key}"));
        }
    };
    let Ok(buckets) = s.buckets.read() else {
        return serde_json::json!({"error": "poisoned"});
    };
    let (Some(src), Some(sink)) = (buckets.get(&s.src), buckets.get(&s.sink)) else {
        return serde_json::json!({"error": "no such bucket"});
    };
    let mut seen = 0u64;
    let mut after: Option<String> = None;
    loop {
        let (page, _, more, last) = src.list(src_prefix, after.as_deref(), None, 1000);
        for (key, e) in page {
            objects += 1;
            let (size, _, _) = s.facts(&key, &e);
            bytes += size;
            let to = format!("{sink_prefix}{}", &key[src_prefix.len()..]);
            let Some(Entry::Stored(got)) = sink.get(&to) else {
                missing += 1;
                note("missing", &to, &mut examples);
                continue;
            };
            seen += 1;
            let ok = got.size == size && {
                let mut pos = 0;
                got.parts.iter().all(|(m, len)| {
                    let want = match &e {
                        Entry::Generated(_) => Content::of(&s.spec, &key, 0).md5(pos, *len),
                        Entry::Stored(st) => match (&st.data, st.version) {
                            (_, Some(v)) => Content::of(&s.spec, &key, v).md5(pos, *len),
                            (Some(d), None) if (pos + len) as usize <= d.len() => {
                                md5_of(&d[pos as usize..(pos + len) as usize])
                            }
                            _ => [0; 16],
                        },
                    };
                    pos += len;
                    want == *m
                })
            };
            match ok {
                true => same += 1,
                false => {
                    differ += 1;
                    note("differs", &to, &mut examples);
                }
            }
        }
        if !more {
            break;
        }
        after = last;
    }
    let in_sink = sink
        .over
        .range::<str, _>((Bound::Included(sink_prefix), Bound::Unbounded))
        .take_while(|(k, _)| k.starts_with(sink_prefix))
        .filter(|(_, v)| v.is_some())
        .count() as u64;
    extra += in_sink.saturating_sub(seen);
    serde_json::json!({
        "objects": objects, "bytes": bytes, "same": same, "differ": differ,
        "missing": missing, "extra": extra, "examples": examples,
        "equal": differ == 0 && missing == 0 && extra == 0,
    })
}
