//! Fault injection, a test hook in front of the stores (only in a build with the cargo feature
//! `faults`, which `cargo test` turns on; release binaries have none of it): [`FaultyStore`] wraps any store
//! (object_store's wrapper style, like its `ThrottledStore`) and fails a share of the requests
//! the way a struggling cloud does: 503 SlowDown, 500, 429, connection resets, timeouts and
//! GET bodies cut short. `stores/mod.rs` wraps every cloud store it builds when `SLATE_FAULTS` is
//! set; local folders are slate's own file code, not object_store, and are never faulted.
//!
//! The errors look exactly like the ones object_store's HTTP client returns (the same text,
//! the same `HttpError` kinds underneath), so slate's retries and `/metrics` classify them as
//! they would real ones. A fault never fakes success: it is decided before the request is
//! handed on, so a failed PUT wrote nothing. The one exception is `lost` (the store did the
//! work, its answer never arrived), which only plain PUTs and DELETEs get, where doing the work
//! again is harmless.

use std::ops::Range;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::client::{HttpError, HttpErrorKind};
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartId, MultipartUpload,
    ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    RenameOptions, Result, UploadPart,
};

/// The environment variable that turns fault injection on.
pub const ENV: &str = super::FAULTS_ENV;

/// One kind of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// 503 Service Unavailable, `SlowDown` (Azure: `ServerBusy`): the store throttles.
    SlowDown,
    /// 500 Internal Server Error.
    Internal,
    /// 429 Too Many Requests: the store throttles.
    TooMany,
    /// The connection is reset before an answer.
    Reset,
    /// No answer in time.
    Timeout,
    /// A GET answers, and its body stops part-way with an error.
    Truncate,
    /// The store did the work and the answer was lost (plain PUT and DELETE only).
    Lost,
}

impl FaultKind {
    const ALL: [(&'static str, FaultKind); 7] = [
        ("503", FaultKind::SlowDown),
        ("500", FaultKind::Internal),
        ("429", FaultKind::TooMany),
        ("reset", FaultKind::Reset),
        ("timeout", FaultKind::Timeout),
        ("truncate", FaultKind::Truncate),
        ("lost", FaultKind::Lost),
    ];

    /// The name `SLATE_FAULTS` uses.
    pub fn name(self) -> &'static str {
        FaultKind::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(n, _)| n)
    }

    fn parse(s: &str) -> Option<FaultKind> {
        let s = s.trim().to_ascii_lowercase();
        let s = match s.as_str() {
            "slowdown" => "503",
            "internal" => "500",
            "toomany" | "throttle" => "429",
            other => other,
        };
        FaultKind::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, k)| *k)
    }
}

/// What `SLATE_FAULTS` asks for: `rate=0.2,seed=7,kinds=503,500,429,reset,timeout,truncate`
/// (kinds may also be joined with `+`), `until_ms=3000` (faults only in the first 3 s of each
/// store's life), `max=100` (at most 100 faults per store), `prefix=a/` (only requests for keys
/// directly in `a/`, not in `a/b/`: one hot prefix of a store, as `stores::pace` names them).
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Share of the requests that fail, 0..=1.
    pub rate: f64,
    pub seed: u64,
    pub kinds: Vec<FaultKind>,
    /// Faults only this long after the store was built; None: always.
    pub until: Option<Duration>,
    /// At most this many faults per store; None: no bound.
    pub max: Option<u64>,
    /// Only requests for keys directly in this prefix (`stores::pace::prefix_of`); None: all.
    pub prefix: Option<String>,
}

impl FaultConfig {
    /// The default kinds: everything but `lost`.
    pub fn default_kinds() -> Vec<FaultKind> {
        FaultKind::ALL
            .iter()
            .map(|(_, k)| *k)
            .filter(|k| *k != FaultKind::Lost)
            .collect()
    }

    /// Parses the value of `SLATE_FAULTS`.
    pub fn parse(s: &str) -> std::result::Result<FaultConfig, String> {
        let mut cfg = FaultConfig {
            rate: 0.1,
            seed: seed_from_clock(),
            kinds: Vec::new(),
            until: None,
            max: None,
            prefix: None,
        };
        let mut in_kinds = false;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = match part.split_once('=') {
                Some((k, v)) => (k.trim().to_ascii_lowercase(), v.trim()),
                // `kinds=503,500`: the words after `kinds=` are more kinds
                None if in_kinds => ("kinds".to_string(), part),
                None => return Err(format!("'{part}' is not key=value")),
            };
            in_kinds = key == "kinds";
            let number = |what: &str| {
                value
                    .parse::<u64>()
                    .map_err(|_| format!("{what}: '{value}' is not a whole number"))
            };
            match key.as_str() {
                "rate" => {
                    let r: f64 = value
                        .parse()
                        .map_err(|_| format!("rate: '{value}' is not a number"))?;
                    if !(0.0..=1.0).contains(&r) {
                        return Err(format!("rate: {r} is outside 0..=1"));
                    }
                    cfg.rate = r;
                }
                "seed" => cfg.seed = number("seed")?,
                "until_ms" => cfg.until = Some(Duration::from_millis(number("until_ms")?)),
                "max" => cfg.max = Some(number("max")?),
                "prefix" => cfg.prefix = Some(value.to_string()),
                "kinds" => {
                    for k in value.split('+').filter(|k| !k.trim().is_empty()) {
                        let kind = FaultKind::parse(k).ok_or_else(|| {
                            format!(
                                "unknown kind '{}' (known: 503, 500, 429, reset, timeout, truncate, lost)",
                                k.trim()
                            )
                        })?;
                        if !cfg.kinds.contains(&kind) {
                            cfg.kinds.push(kind);
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "unknown setting '{other}' (known: rate, seed, kinds, until_ms, max)"
                    ))
                }
            }
        }
        if cfg.kinds.is_empty() {
            cfg.kinds = FaultConfig::default_kinds();
        }
        Ok(cfg)
    }

    /// `SLATE_FAULTS` from the environment: None when unset or empty.
    pub fn from_env() -> Option<std::result::Result<FaultConfig, String>> {
        let v = std::env::var(ENV).ok().filter(|v| !v.trim().is_empty())?;
        Some(FaultConfig::parse(&v))
    }

    /// One line for the log.
    pub fn describe(&self) -> String {
        let kinds: Vec<&str> = self.kinds.iter().map(|k| k.name()).collect();
        let mut s = format!(
            "rate={}, seed={}, kinds={}",
            self.rate,
            self.seed,
            kinds.join("+")
        );
        if let Some(u) = self.until {
            s.push_str(&format!(", until_ms={}", u.as_millis()));
        }
        if let Some(m) = self.max {
            s.push_str(&format!(", max={m}"));
        }
        if let Some(p) = &self.prefix {
            s.push_str(&format!(", prefix={p}"));
        }
        s
    }
}

fn seed_from_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

/// Faults injected in this process, every store together.
static INJECTED: AtomicU64 = AtomicU64::new(0);

/// How many faults this process injected so far.
pub fn injected() -> u64 {
    INJECTED.load(Relaxed)
}

/// What a request is, for the kinds of fault it can get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// A GET with a body: can be truncated.
    Get,
    /// A plain overwriting PUT: its answer can be lost.
    Put,
    /// A DELETE: its answer can be lost.
    Delete,
    /// Anything else (HEAD, list, copy, multipart steps).
    Other,
}

impl FaultKind {
    fn fits(self, op: Op) -> bool {
        match self {
            FaultKind::Truncate => op == Op::Get,
            FaultKind::Lost => matches!(op, Op::Put | Op::Delete),
            _ => true,
        }
    }
}

/// The dice of one store: the configuration, a seeded xorshift generator and the count.
#[derive(Debug)]
struct Dice {
    cfg: FaultConfig,
    state: AtomicU64,
    born: Instant,
    count: AtomicU64,
    /// The store's name as object_store puts it in its errors (`S3`, `MicrosoftAzure`, `GCS`).
    store: &'static str,
}

impl Dice {
    fn new(cfg: FaultConfig, store: &'static str) -> Dice {
        // xorshift must not start at zero
        let state = cfg.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        Dice {
            cfg,
            state: AtomicU64::new(state),
            born: Instant::now(),
            count: AtomicU64::new(0),
            store,
        }
    }

    /// The next number of the xorshift64* sequence.
    fn next(&self) -> u64 {
        let step = |mut x: u64| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x
        };
        let prev = self
            .state
            .fetch_update(Relaxed, Relaxed, |x| Some(step(x)))
            .unwrap_or(1);
        step(prev).wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in [0, 1).
    fn unit(&self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Whether this request fails, and how.
    fn roll(&self, op: Op, method: &str, path: &str) -> Option<FaultKind> {
        if self.cfg.until.is_some_and(|u| self.born.elapsed() >= u)
            || self.cfg.max.is_some_and(|m| self.count.load(Relaxed) >= m)
            || self
                .cfg
                .prefix
                .as_ref()
                .is_some_and(|p| super::pace::prefix_of(path) != p.as_str())
        {
            return None;
        }
        if self.unit() >= self.cfg.rate {
            return None;
        }
        let fitting: Vec<FaultKind> = self
            .cfg
            .kinds
            .iter()
            .copied()
            .filter(|k| k.fits(op))
            .collect();
        if fitting.is_empty() {
            return None;
        }
        let kind = fitting[(self.next() % fitting.len() as u64) as usize];
        self.count.fetch_add(1, Relaxed);
        INJECTED.fetch_add(1, Relaxed);
        tracing::debug!(
            target: "slate::stores::faults",
            store = self.store,
            %method,
            %path,
            kind = kind.name(),
            "injected fault"
        );
        Some(kind)
    }

    /// The error object_store would return for `kind` (not `Truncate`, which fails a body).
    fn error(&self, kind: FaultKind, method: &str, path: &str) -> object_store::Error {
        let (code, reason, xml) = match kind {
            FaultKind::SlowDown if self.store == "MicrosoftAzure" => (
                503,
                "Service Unavailable",
                "ServerBusy</Code><Message>The server is currently unable to receive requests. Please retry your request.",
            ),
            FaultKind::SlowDown => (503, "Service Unavailable", "SlowDown</Code><Message>Please reduce your request rate."),
            FaultKind::Internal => (
                500,
                "Internal Server Error",
                "InternalError</Code><Message>We encountered an internal error. Please try again.",
            ),
            FaultKind::TooMany => (429, "Too Many Requests", "TooManyRequests</Code><Message>Please reduce your request rate."),
            FaultKind::Reset | FaultKind::Lost => {
                return self.http_error(method, path, HttpErrorKind::Request, std::io::ErrorKind::ConnectionReset, "connection reset by peer")
            }
            FaultKind::Timeout => {
                return self.http_error(method, path, HttpErrorKind::Timeout, std::io::ErrorKind::TimedOut, "operation timed out")
            }
            FaultKind::Truncate => {
                return self.http_error(method, path, HttpErrorKind::Request, std::io::ErrorKind::UnexpectedEof, "connection closed before message completed")
            }
        };
        // object_store's RetryError over RequestError::Status, word for word
        let text = format!(
            "Error performing {method} {path} in 0ns - Server returned non-2xx status code: \
             {code} {reason}: <?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{xml} \
             (injected by {ENV})</Message></Error>"
        );
        object_store::Error::Generic {
            store: self.store,
            source: Box::new(Injected { text, http: None }),
        }
    }

    /// A transport failure: object_store's RetryError over an `HttpError` of `kind`.
    fn http_error(
        &self,
        method: &str,
        path: &str,
        kind: HttpErrorKind,
        io: std::io::ErrorKind,
        what: &str,
    ) -> object_store::Error {
        let http = HttpError::new(
            kind,
            std::io::Error::new(io, format!("{what} (injected by {ENV})")),
        );
        object_store::Error::Generic {
            store: self.store,
            source: Box::new(Injected {
                text: format!("Error performing {method} {path} in 0ns - {http}"),
                http: Some(http),
            }),
        }
    }

    /// A body error part-way through a GET, as object_store's body stream reports it.
    fn body_error(&self) -> object_store::Error {
        object_store::Error::Generic {
            store: self.store,
            source: Box::new(HttpError::new(
                HttpErrorKind::Request,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("connection closed before message completed (injected by {ENV})"),
                ),
            )),
        }
    }
}

/// An injected error: the text object_store would show, and the transport error beneath it
/// when there is one (what `metrics::status_of` looks for).
#[derive(Debug)]
struct Injected {
    text: String,
    http: Option<HttpError>,
}

impl std::fmt::Display for Injected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Injected {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.http
            .as_ref()
            .map(|h| h as &(dyn std::error::Error + 'static))
    }
}

/// A store that fails a share of its requests (see the module's documentation).
#[derive(Debug)]
pub struct FaultyStore<T> {
    inner: Arc<T>,
    dice: Arc<Dice>,
}

impl<T> FaultyStore<T> {
    /// Wraps `inner`; `store` is object_store's name for it in errors (`S3`,
    /// `MicrosoftAzure`, `GCS`).
    pub fn new(inner: T, cfg: FaultConfig, store: &'static str) -> FaultyStore<T> {
        FaultyStore {
            inner: Arc::new(inner),
            dice: Arc::new(Dice::new(cfg, store)),
        }
    }

    /// Faults this store injected so far.
    pub fn injected(&self) -> u64 {
        self.dice.count.load(Relaxed)
    }

    /// Fails before the request is sent, or lets it through.
    async fn before(&self, op: Op, method: &str, path: &str) -> Result<Option<FaultKind>> {
        match self.dice.roll(op, method, path) {
            None => Ok(None),
            Some(k @ (FaultKind::Lost | FaultKind::Truncate)) => Ok(Some(k)),
            Some(k) => {
                if k == FaultKind::Timeout {
                    // a timeout takes a while; not the full read timeout
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(self.dice.error(k, method, path))
            }
        }
    }

    /// A listing that fails at once, when the dice say so (a listing is one GET per page).
    fn list_fault(&self, prefix: Option<&Path>) -> Option<BoxStream<'static, Result<ObjectMeta>>> {
        let where_ = prefix.map(|p| p.to_string()).unwrap_or_default();
        let k = self.dice.roll(Op::Other, "GET", &where_)?;
        let e = self.dice.error(k, "GET", &where_);
        Some(stream::once(futures::future::ready(Err(e))).boxed())
    }
}

impl<T: std::fmt::Display> std::fmt::Display for FaultyStore<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

/// `stream` with its bytes cut off after `cut` bytes (less than the body's length), then
/// `err`: what a connection dropped mid-body looks like.
fn truncate(
    stream: BoxStream<'static, Result<Bytes>>,
    cut: u64,
    err: object_store::Error,
) -> BoxStream<'static, Result<Bytes>> {
    enum Next {
        Body(BoxStream<'static, Result<Bytes>>, u64, object_store::Error),
        Fail(object_store::Error),
        Done,
    }
    stream::unfold(Next::Body(stream, 0, err), move |next| async move {
        match next {
            Next::Done => None,
            Next::Fail(err) => Some((Err(err), Next::Done)),
            Next::Body(mut s, sent, err) => match s.next().await {
                Some(Ok(b)) if sent + b.len() as u64 > cut => {
                    let keep = (cut - sent) as usize;
                    if keep == 0 {
                        Some((Err(err), Next::Done))
                    } else {
                        // the part that arrived, then the error
                        Some((Ok(b.slice(..keep)), Next::Fail(err)))
                    }
                }
                Some(Ok(b)) => {
                    let sent = sent + b.len() as u64;
                    Some((Ok(b), Next::Body(s, sent, err)))
                }
                Some(Err(e)) => Some((Err(e), Next::Done)),
                None => None,
            },
        }
    })
    .boxed()
}

#[async_trait]
impl<T: ObjectStore> ObjectStore for FaultyStore<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let op = match opts.mode {
            PutMode::Overwrite => Op::Put,
            _ => Op::Other,
        };
        let fault = self.before(op, "PUT", location.as_ref()).await?;
        let r = self.inner.put_opts(location, payload, opts).await?;
        match fault {
            Some(FaultKind::Lost) => {
                Err(self.dice.error(FaultKind::Lost, "PUT", location.as_ref()))
            }
            _ => Ok(r),
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.before(Op::Other, "POST", location.as_ref()).await?;
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(FaultyUpload {
            upload,
            dice: self.dice.clone(),
            path: location.to_string(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let op = if options.head { Op::Other } else { Op::Get };
        let method = if options.head { "HEAD" } else { "GET" };
        let fault = self.before(op, method, location.as_ref()).await?;
        let res = self.inner.get_opts(location, options).await?;
        let len = res.range.end - res.range.start;
        match (fault, res.payload) {
            (Some(FaultKind::Truncate), GetResultPayload::Stream(s)) if len > 0 => {
                let cut = self.dice.next() % len;
                Ok(GetResult {
                    payload: GetResultPayload::Stream(truncate(s, cut, self.dice.body_error())),
                    ..res
                })
            }
            (_, payload) => Ok(GetResult { payload, ..res }),
        }
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.before(Op::Other, "GET", location.as_ref()).await?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let (inner, dice) = (self.inner.clone(), self.dice.clone());
        locations
            .then(move |p| {
                let (inner, dice) = (inner.clone(), dice.clone());
                async move {
                    let p = p?;
                    let fault = dice.roll(Op::Delete, "DELETE", p.as_ref());
                    if let Some(k) = fault.filter(|k| *k != FaultKind::Lost) {
                        return Err(dice.error(k, "DELETE", p.as_ref()));
                    }
                    let one = stream::once(futures::future::ready(Ok(p.clone()))).boxed();
                    let r = inner.delete_stream(one).next().await.unwrap_or(Ok(p));
                    match (fault, r) {
                        (Some(FaultKind::Lost), Ok(p)) => {
                            Err(dice.error(FaultKind::Lost, "DELETE", p.as_ref()))
                        }
                        (_, r) => r,
                    }
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.list_fault(prefix)
            .unwrap_or_else(|| self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.list_fault(prefix)
            .unwrap_or_else(|| self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let where_ = prefix.map(|p| p.to_string()).unwrap_or_default();
        self.before(Op::Other, "GET", &where_).await?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.before(Op::Other, "PUT", to.as_ref()).await?;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.before(Op::Other, "PUT", to.as_ref()).await?;
        self.inner.rename_opts(from, to, options).await
    }
}

#[async_trait]
impl<T: PaginatedListStore> PaginatedListStore for FaultyStore<T> {
    async fn list_paginated(
        &self,
        prefix: Option<&str>,
        opts: PaginatedListOptions,
    ) -> Result<PaginatedListResult> {
        self.before(Op::Other, "GET", prefix.unwrap_or_default())
            .await?;
        self.inner.list_paginated(prefix, opts).await
    }
}

#[async_trait]
impl<T: MultipartStore> MultipartStore for FaultyStore<T> {
    async fn create_multipart(&self, path: &Path) -> Result<MultipartId> {
        self.before(Op::Other, "POST", path.as_ref()).await?;
        self.inner.create_multipart(path).await
    }

    async fn create_multipart_opts(
        &self,
        path: &Path,
        opts: PutMultipartOptions,
    ) -> Result<MultipartId> {
        self.before(Op::Other, "POST", path.as_ref()).await?;
        self.inner.create_multipart_opts(path, opts).await
    }

    async fn put_part(
        &self,
        path: &Path,
        id: &MultipartId,
        part_idx: usize,
        data: PutPayload,
    ) -> Result<PartId> {
        self.before(Op::Other, "PUT", path.as_ref()).await?;
        self.inner.put_part(path, id, part_idx, data).await
    }

    async fn complete_multipart(
        &self,
        path: &Path,
        id: &MultipartId,
        parts: Vec<PartId>,
    ) -> Result<PutResult> {
        self.before(Op::Other, "POST", path.as_ref()).await?;
        self.inner.complete_multipart(path, id, parts).await
    }

    /// Never faulted: an abort is the clean-up after a failure.
    async fn abort_multipart(&self, path: &Path, id: &MultipartId) -> Result<()> {
        self.inner.abort_multipart(path, id).await
    }
}

/// The multipart upload of a [`FaultyStore`]: parts and the completion fail like requests.
#[derive(Debug)]
struct FaultyUpload {
    upload: Box<dyn MultipartUpload>,
    dice: Arc<Dice>,
    path: String,
}

#[async_trait]
impl MultipartUpload for FaultyUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        match self.dice.roll(Op::Other, "PUT", &self.path) {
            Some(k) => {
                let e = self.dice.error(k, "PUT", &self.path);
                Box::pin(futures::future::ready(Err(e)))
            }
            None => self.upload.put_part(data),
        }
    }

    async fn complete(&mut self) -> Result<PutResult> {
        if let Some(k) = self.dice.roll(Op::Other, "POST", &self.path) {
            return Err(self.dice.error(k, "POST", &self.path));
        }
        self.upload.complete().await
    }

    /// Never faulted: an abort is the clean-up after a failure.
    async fn abort(&mut self) -> Result<()> {
        self.upload.abort().await
    }
}

/// The variable that makes pairs whose label contains a text fail: `TEXT:TIMES` (test builds
/// only, see the `faults` feature): the daemon's supervisor must restart such a pair while
/// the others run on.
pub const PAIR_ENV: &str = "SLATE_FAULT_PAIR";

/// An injected failure for the pair `label`, while `SLATE_FAULT_PAIR` asks for more of them.
pub fn pair_failure(label: &str) -> Option<crate::core::error::SlateError> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static DONE: Mutex<Option<HashMap<String, u32>>> = Mutex::new(None);
    let spec = std::env::var(PAIR_ENV).ok()?;
    let (text, times) = spec.rsplit_once(':')?;
    let times: u32 = times.parse().ok()?;
    if text.is_empty() || !label.contains(text) {
        return None;
    }
    let mut done = DONE.lock().ok()?;
    let n = done
        .get_or_insert_with(HashMap::new)
        .entry(label.to_string())
        .or_insert(0);
    if *n >= times {
        return None;
    }
    *n += 1;
    Some(crate::core::error::SlateError::Store {
        url: label.to_string(),
        detail: format!("injected pair failure {n} of {times} ({PAIR_ENV})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    fn cfg(rate: f64, kinds: &[FaultKind]) -> FaultConfig {
        FaultConfig {
            rate,
            seed: 7,
            kinds: kinds.to_vec(),
            until: None,
            max: None,
            prefix: None,
        }
    }

    #[test]
    fn a_prefix_limits_the_faults_to_its_keys() {
        let c = FaultConfig::parse("rate=1,kinds=503,prefix=a/").unwrap();
        assert_eq!(c.prefix.as_deref(), Some("a/"));
        assert!(c.describe().ends_with(", prefix=a/"), "{}", c.describe());
        let d = Dice::new(c, "S3");
        assert_eq!(d.roll(Op::Put, "PUT", "a/1"), Some(FaultKind::SlowDown));
        assert_eq!(d.roll(Op::Put, "PUT", "b/1"), None);
        assert_eq!(d.roll(Op::Put, "PUT", "ab/1"), None);
        assert_eq!(
            d.roll(Op::Put, "PUT", "a/b/1"),
            None,
            "a deeper prefix is another"
        );
    }

    #[test]
    fn parses_the_variable() {
        let c =
            FaultConfig::parse("rate=0.2,seed=7,kinds=503,500,429,reset,timeout,truncate").unwrap();
        assert_eq!(c.rate, 0.2);
        assert_eq!(c.seed, 7);
        assert_eq!(c.kinds, FaultConfig::default_kinds());
        assert_eq!((c.until, c.max), (None, None));
        let c = FaultConfig::parse("kinds=503+lost, rate=1, until_ms=3000, max=5").unwrap();
        assert_eq!(c.kinds, vec![FaultKind::SlowDown, FaultKind::Lost]);
        assert_eq!(c.until, Some(Duration::from_millis(3000)));
        assert_eq!(c.max, Some(5));
        assert_eq!(
            FaultConfig::parse("rate=0.5").unwrap().kinds,
            FaultConfig::default_kinds()
        );
        for bad in ["rate=2", "rate=x", "kinds=418", "speed=3", "503", "seed=-1"] {
            assert!(FaultConfig::parse(bad).is_err(), "{bad}");
        }
        let d = FaultConfig::parse("rate=0.25,seed=3,kinds=503+reset,until_ms=10").unwrap();
        assert_eq!(
            d.describe(),
            "rate=0.25, seed=3, kinds=503+reset, until_ms=10"
        );
    }

    #[test]
    fn the_rate_is_kept_and_the_seed_repeats() {
        let a = Dice::new(cfg(0.2, &FaultConfig::default_kinds()), "S3");
        let b = Dice::new(cfg(0.2, &FaultConfig::default_kinds()), "S3");
        let rolls: Vec<_> = (0..10_000).map(|_| a.roll(Op::Get, "GET", "k")).collect();
        let again: Vec<_> = (0..10_000).map(|_| b.roll(Op::Get, "GET", "k")).collect();
        assert_eq!(rolls, again);
        let n = rolls.iter().filter(|r| r.is_some()).count();
        assert!((1_700..2_300).contains(&n), "{n} faults in 10,000 at 20%");
        for k in FaultConfig::default_kinds() {
            assert!(rolls.contains(&Some(k)), "{k:?} never rolled");
        }
        // a PUT is never truncated, a HEAD never lost
        let puts = Dice::new(cfg(1.0, &[FaultKind::Truncate]), "S3");
        assert_eq!(puts.roll(Op::Put, "PUT", "k"), None);
        let heads = Dice::new(cfg(1.0, &[FaultKind::Lost]), "S3");
        assert_eq!(heads.roll(Op::Other, "HEAD", "k"), None);
        // bounded by count and by time
        let mut c = cfg(1.0, &[FaultKind::SlowDown]);
        c.max = Some(3);
        let d = Dice::new(c, "S3");
        let n = (0..10).filter_map(|_| d.roll(Op::Get, "GET", "k")).count();
        assert_eq!(n, 3);
        let mut c = cfg(1.0, &[FaultKind::SlowDown]);
        c.until = Some(Duration::ZERO);
        assert_eq!(Dice::new(c, "S3").roll(Op::Get, "GET", "k"), None);
    }

    #[test]
    fn injected_errors_are_classified_like_real_ones() {
        use crate::core::metrics::{status_of, status_of_text};
        let d = Dice::new(cfg(1.0, &[]), "S3");
        for (kind, status) in [
            (FaultKind::SlowDown, "503"),
            (FaultKind::Internal, "500"),
            (FaultKind::TooMany, "429"),
            (FaultKind::Reset, "connection"),
            (FaultKind::Timeout, "timeout"),
            (FaultKind::Truncate, "connection"),
        ] {
            let e = d.error(kind, "PUT", "b/k");
            assert!(matches!(e, object_store::Error::Generic { .. }), "{e}");
            assert_eq!(status_of(&e), status, "{kind:?}: {e}");
            assert_eq!(status_of_text(&e.to_string()), status, "{kind:?}: {e}");
            assert!(crate::stores::retry::transient(&e), "{kind:?}");
        }
        let e = d.body_error();
        assert_eq!(status_of(&e), "connection");
        assert_eq!(status_of_text(&e.to_string()), "connection", "{e}");
        let slow = d.error(FaultKind::SlowDown, "GET", "b/k").to_string();
        assert!(slow.contains("SlowDown"), "{slow}");
        assert!(crate::stores::retry::throttle(&status_of_text(&slow)));
        let azure = Dice::new(cfg(1.0, &[]), "MicrosoftAzure");
        let busy = azure.error(FaultKind::SlowDown, "PUT", "c/k").to_string();
        assert!(busy.contains("ServerBusy") && busy.starts_with("Generic MicrosoftAzure error"));
    }

    #[tokio::test]
    async fn a_failed_put_wrote_nothing_and_a_lost_one_did() {
        let store = FaultyStore::new(InMemory::new(), cfg(1.0, &[FaultKind::SlowDown]), "S3");
        let p = Path::from("a/b");
        assert!(store.put(&p, "x".into()).await.is_err());
        assert!(matches!(
            store.inner.head(&p).await,
            Err(object_store::Error::NotFound { .. })
        ));
        let store = FaultyStore::new(InMemory::new(), cfg(1.0, &[FaultKind::Lost]), "S3");
        assert!(store.put(&p, "x".into()).await.is_err());
        assert!(
            store.inner.head(&p).await.is_ok(),
            "lost: the write happened"
        );
        assert!(store.delete(&p).await.is_err());
        assert!(
            store.inner.head(&p).await.is_err(),
            "lost: the delete happened"
        );
        // not idempotent: a create-only PUT never gets a lost answer
        let r = store.put_opts(&p, "y".into(), PutMode::Create.into()).await;
        assert!(r.is_ok());
        // multipart steps fail before they are sent; the abort never fails
        let store = FaultyStore::new(InMemory::new(), cfg(1.0, &[FaultKind::Reset]), "S3");
        assert!(store.create_multipart(&p).await.is_err());
        let id = store.inner.create_multipart(&p).await.unwrap();
        assert!(store.put_part(&p, &id, 0, "z".into()).await.is_err());
        assert!(store.complete_multipart(&p, &id, vec![]).await.is_err());
        assert!(store.abort_multipart(&p, &id).await.is_ok());
        assert!(store.inner.head(&p).await.is_err());
        assert_eq!(store.injected(), 3);
    }

    #[tokio::test]
    async fn a_truncated_body_stops_with_an_error() {
        let inner = InMemory::new();
        let p = Path::from("big");
        let data = Bytes::from(vec![7u8; 100_000]);
        inner.put(&p, data.clone().into()).await.unwrap();
        let store = FaultyStore::new(inner, cfg(1.0, &[FaultKind::Truncate]), "S3");
        for _ in 0..20 {
            let res = store.get(&p).await.expect("the GET itself answers");
            let mut s = res.into_stream();
            let (mut got, mut failed) = (0usize, None);
            while let Some(item) = s.next().await {
                match item {
                    Ok(b) => got += b.len(),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            let e = failed.expect("the body fails");
            assert!(got < data.len(), "{got}");
            assert_eq!(crate::core::metrics::status_of(&e), "connection");
        }
        // a HEAD has no body to cut, and lists and pages fail as requests
        assert!(store.head(&p).await.is_ok());
        let listed: Vec<_> = store.list(None).collect().await;
        assert_eq!(listed.len(), 1);
        let store = FaultyStore::new(InMemory::new(), cfg(1.0, &[FaultKind::Internal]), "S3");
        let listed: Vec<_> = store.list(None).collect().await;
        assert!(listed.len() == 1 && listed[0].is_err());
    }
}
