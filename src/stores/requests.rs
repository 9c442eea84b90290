//! Every request slate makes to a store, counted by store and class (LIST, HEAD, GET, PUT,
//! DELETE), and every receive from an event queue: what following a bucket costs, shown by
//! `sync --once --estimate`, the daemon's hourly line and `/metrics`. The counting sits in the
//! HTTP client of every store client and of slate's own signed calls, so nothing escapes it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::ClientOptions;

use crate::core::location::Scheme;

/// The classes a store prices requests by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    List,
    Head,
    Get,
    Put,
    Delete,
}

impl Class {
    pub const ALL: [Class; 5] = [
        Class::List,
        Class::Head,
        Class::Get,
        Class::Put,
        Class::Delete,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Class::List => "LIST",
            Class::Head => "HEAD",
            Class::Get => "GET",
            Class::Put => "PUT",
            Class::Delete => "DELETE",
        }
    }
}

pub const STORES: [Scheme; 3] = [Scheme::S3, Scheme::Azure, Scheme::Gcs];

static COUNTS: [[AtomicU64; 5]; 3] = [const { [const { AtomicU64::new(0) }; 5] }; 3];
static RECEIVES: AtomicU64 = AtomicU64::new(0);

fn store_index(s: Scheme) -> Option<usize> {
    STORES.iter().position(|x| *x == s)
}

/// The class of a request by its method and URL (S3, Azure Blob and GCS alike): a GET of a
/// container or bucket with a listing query is a LIST; POST and PUT are writes, a POST of
/// S3's `?delete` (a batch delete) a DELETE.
pub fn classify(method: &str, uri: &str) -> Class {
    let query = uri.split_once('?').map(|(_, q)| q).unwrap_or("");
    let has = |k: &str| {
        query
            .split('&')
            .any(|p| p == k || p.starts_with(&format!("{k}=")))
    };
    match method {
        "HEAD" => Class::Head,
        "DELETE" => Class::Delete,
        "POST" if has("delete") => Class::Delete,
        "GET" => {
            let path = uri.split('?').next().unwrap_or("");
            // S3 ListObjectsV2, Azure List Blobs, GCS's JSON objects.list and XML listing
            let listing = has("list-type")
                || query.contains("comp=list")
                || path.ends_with("/o")
                || has("prefix")
                || has("delimiter");
            if listing {
                Class::List
            } else {
                Class::Get
            }
        }
        _ => Class::Put,
    }
}

/// Counts one request to `store`.
pub fn count(store: Scheme, class: Class) {
    if let Some(i) = store_index(store) {
        COUNTS[i][class as usize].fetch_add(1, Relaxed);
    }
}

/// Counts one receive call to an event queue (SQS ReceiveMessage, Azure Get Messages,
/// Pub/Sub pull).
pub fn count_receive() {
    RECEIVES.fetch_add(1, Relaxed);
}

/// The counts so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// By store (S3, Azure, GCS) and class (LIST, HEAD, GET, PUT, DELETE).
    pub by_store: [[u64; 5]; 3],
    pub receives: u64,
}

impl Counts {
    pub fn now() -> Counts {
        let mut c = Counts::default();
        for (i, row) in COUNTS.iter().enumerate() {
            for (j, n) in row.iter().enumerate() {
                c.by_store[i][j] = n.load(Relaxed);
            }
        }
        c.receives = RECEIVES.load(Relaxed);
        c
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Counts) -> Counts {
        let mut c = *self;
        for i in 0..3 {
            for j in 0..5 {
                c.by_store[i][j] = self.by_store[i][j].saturating_sub(earlier.by_store[i][j]);
            }
        }
        c.receives = self.receives.saturating_sub(earlier.receives);
        c
    }

    /// Requests of `class`, all stores.
    pub fn of(&self, class: Class) -> u64 {
        self.by_store.iter().map(|r| r[class as usize]).sum()
    }

    /// Requests of `class` to `store`.
    pub fn of_store(&self, store: Scheme, class: Class) -> u64 {
        store_index(store).map_or(0, |i| self.by_store[i][class as usize])
    }

    pub fn total(&self) -> u64 {
        self.by_store.iter().flatten().sum()
    }

    /// `LIST 3, HEAD 0, GET 12, PUT 12, DELETE 1; queue receives 60`.
    pub fn line(&self) -> String {
        let mut s = Class::ALL
            .iter()
            .map(|c| format!("{} {}", c.name(), self.of(*c)))
            .collect::<Vec<_>>()
            .join(", ");
        if self.receives > 0 {
            s.push_str(&format!("; queue receives {}", self.receives));
        }
        s
    }
}

/// reqwest, with every request counted for `store` (and, for S3, S3's tag count kept: see
/// `s3tags`).
#[derive(Debug, Clone, Copy)]
pub struct CountingConnector {
    pub store: Scheme,
    /// Keep `x-amz-tagging-count` (the S3 store client's).
    pub tags: bool,
}

impl CountingConnector {
    pub fn new(store: Scheme) -> CountingConnector {
        CountingConnector { store, tags: false }
    }
}

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = if self.tags {
            super::s3tags::TagCountingConnector.connect(options)?
        } else {
            ReqwestConnector::default().connect(options)?
        };
        Ok(HttpClient::new(Counting {
            store: self.store,
            inner,
        }))
    }
}

#[derive(Debug)]
struct Counting {
    store: Scheme,
    inner: HttpClient,
}

#[async_trait::async_trait]
impl HttpService for Counting {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        count(
            self.store,
            classify(req.method().as_str(), &req.uri().to_string()),
        );
        self.inner.execute(req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classed_as_stores_price_them() {
        for (method, uri, want) in [
            (
                "GET",
                "http://h/b?list-type=2&prefix=a%2F&delimiter=%2F",
                Class::List,
            ),
            (
                "GET",
                "http://h/acct/c?restype=container&comp=list&prefix=x",
                Class::List,
            ),
            ("GET", "http://h/storage/v1/b/bkt/o", Class::List),
            (
                "GET",
                "http://h/storage/v1/b/bkt/o?prefix=p&pageToken=x",
                Class::List,
            ),
            ("GET", "http://h/b/key", Class::Get),
            ("GET", "http://h/b/key?tagging", Class::Get),
            ("GET", "http://h/b/key?uploadId=1", Class::Get),
            ("GET", "http://h/acct/c/blob?comp=tags", Class::Get),
            ("HEAD", "http://h/b/key", Class::Head),
            ("PUT", "http://h/b/key?partNumber=2&uploadId=1", Class::Put),
            ("POST", "http://h/b/key?uploads", Class::Put),
            ("POST", "http://h/b?delete", Class::Delete),
            ("DELETE", "http://h/b/key", Class::Delete),
            ("PATCH", "http://h/storage/v1/b/bkt/o/key", Class::Put),
        ] {
            assert_eq!(classify(method, uri), want, "{method} {uri}");
        }
    }

    #[test]
    fn counts_add_up_by_store_and_subtract_over_a_window() {
        let before = Counts::now();
        count(Scheme::Gcs, Class::Head);
        count(Scheme::Gcs, Class::Head);
        count(Scheme::Local, Class::Get); // a local folder makes no store request
        count_receive();
        let d = Counts::now().since(&before);
        assert!(d.of_store(Scheme::Gcs, Class::Head) >= 2);
        assert!(d.receives >= 1);
        assert!(d.line().contains("HEAD "), "{}", d.line());
    }
}
