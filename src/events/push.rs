//! Push deliveries (Event Grid webhooks, Pub/Sub push subscriptions): what the server hands
//! over after it has authenticated a request. One [`Fanout`] per cloud, so a delivery reaches
//! every pair whose source it names; the HTTP answer follows [`Delivery`] (200 only after the
//! events are stored, 503 so that the sender retries when they could not be).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::route::{Fanout, Received};
use super::{ParseError, Parsed};
use crate::state::manifest::Manifest;

/// Largest delivery accepted: Event Grid batches are at most 1 MB.
pub const MAX_DELIVERY: usize = 1024 * 1024;

/// What became of one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Stored (or kept as a dead letter, or nothing to do): answer 200.
    Stored,
    /// Event Grid's subscription handshake: answer `{"validationResponse": code}`.
    Handshake(String),
    /// Could not be stored: answer 503, the sender delivers it again.
    Retry,
}

/// The pairs push deliveries feed, shared by every pair of the process.
pub struct Hub {
    /// Event Grid deliveries → `az://` pairs.
    pub eventgrid: Arc<Fanout>,
    /// Pub/Sub push deliveries → `gs://` pairs.
    pub pubsub: Arc<Fanout>,
    /// Deliveries received.
    pub deliveries: AtomicU64,
    /// Every pair of the process has registered: until then a delivery is answered 503 (the
    /// sender retries), never dead-lettered for want of the pair it names.
    ready: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("eventgrid", &self.eventgrid)
            .field("pubsub", &self.pubsub)
            .finish()
    }
}

/// A delivery's body through `parser`; the error is the dead letter's reason.
fn parse_body(
    body: &[u8],
    parser: fn(&str) -> Result<Parsed, ParseError>,
) -> Result<Parsed, String> {
    let text = std::str::from_utf8(body).map_err(|_| "body is not UTF-8".to_string())?;
    parser(text).map_err(|e| e.to_string())
}

impl Hub {
    pub fn new(db: Arc<Manifest>) -> Arc<Hub> {
        Arc::new(Hub {
            eventgrid: Fanout::new(db.clone(), "az", "/events/eventgrid"),
            pubsub: Fanout::new(db, "gs", "/events/pubsub"),
            deliveries: AtomicU64::new(0),
            ready: Default::default(),
        })
    }

    /// Every pair that takes deliveries has registered (or none will): deliveries are stored
    /// from now on.
    pub fn set_ready(&self) {
        self.ready.store(true, Relaxed);
    }

    /// An Event Grid delivery (Event Grid schema or CloudEvents 1.0).
    pub async fn eventgrid(&self, body: &[u8]) -> Delivery {
        let parsed = parse_body(body, super::parse_eventgrid);
        if let Ok(Parsed::Handshake { validation_code }) = &parsed {
            self.deliveries.fetch_add(1, Relaxed);
            return Delivery::Handshake(validation_code.clone());
        }
        self.deliver(&self.eventgrid, "webhook-eventgrid", body, parsed)
            .await
    }

    /// A Pub/Sub push delivery carrying a GCS notification.
    pub async fn pubsub(&self, body: &[u8]) -> Delivery {
        let parsed = parse_body(body, super::parse_gcs_push);
        self.deliver(&self.pubsub, "webhook-pubsub", body, parsed)
            .await
    }

    async fn deliver(
        &self,
        fanout: &Fanout,
        source: &'static str,
        body: &[u8],
        parsed: Result<Parsed, String>,
    ) -> Delivery {
        self.deliveries.fetch_add(1, Relaxed);
        if !self.ready.load(Relaxed) {
            return Delivery::Retry;
        }
        match fanout
            .store(source, vec![Received::new(body.to_vec(), parsed)])
            .await
        {
            Ok(()) => Delivery::Stored,
            Err(e) => {
                tracing::error!(error = %e, "could not store a delivery; the sender will retry");
                Delivery::Retry
            }
        }
    }
}
