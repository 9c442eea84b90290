//! GCS notifications from a Pub/Sub pull subscription, through Google's client
//! (google-cloud-pubsub): one streaming pull, whose leases the client extends while a message
//! is held; each message's events are stored in the inbox, and only then is it acked (ack after
//! commit, DESIGN.md rule 2). A message that could not be stored is nacked, so Pub/Sub
//! delivers it again. Unparseable messages and events of another bucket become dead letters
//! and are acked.
//!
//! `pubsub://projects/P/subscriptions/S`. Credentials: Google's application default
//! credentials (`GOOGLE_APPLICATION_CREDENTIALS`, workload identity, …). With
//! `PUBSUB_EMULATOR_HOST=host:port` (the variable Google's tools use for the emulator) slate
//! talks plain HTTP/2 to the emulator without credentials.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use google_cloud_pubsub::client::Subscriber;

use super::route::{Routed, SourceStats, Target};
use crate::error::{Result, SlateError};

/// One pull subscription.
pub struct PubSubSource {
    client: Subscriber,
    subscription: String,
}

/// `projects/P/subscriptions/S` from `pubsub://projects/P/subscriptions/S`.
pub fn subscription_name(spec: &str) -> Result<String> {
    let bad = || SlateError::BadUrl {
        url: spec.to_string(),
        why: "expected pubsub://projects/PROJECT/subscriptions/SUBSCRIPTION".into(),
    };
    let name = spec.strip_prefix("pubsub://").ok_or_else(bad)?;
    let parts: Vec<&str> = name.split('/').collect();
    let ok = parts.len() == 4
        && parts[0] == "projects"
        && parts[2] == "subscriptions"
        && !parts[1].is_empty()
        && (3..=255).contains(&parts[3].len())
        && parts[3]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.~+%".contains(&b));
    if !ok {
        return Err(bad());
    }
    Ok(name.to_string())
}

impl PubSubSource {
    /// Builds the client for `pubsub://projects/P/subscriptions/S` (the connection itself is
    /// made by the first pull).
    pub async fn connect(spec: &str) -> Result<PubSubSource> {
        let subscription = subscription_name(spec)?;
        let mut b = Subscriber::builder();
        if let Some(host) = std::env::var("PUBSUB_EMULATOR_HOST")
            .ok()
            .filter(|h| !h.is_empty())
        {
            let endpoint = if host.contains("://") {
                host
            } else {
                format!("http://{host}")
            };
            b = b.with_endpoint(endpoint).with_credentials(
                google_cloud_auth::credentials::anonymous::Builder::new().build(),
            );
        }
        let client = b.build().await.map_err(|e| SlateError::Store {
            url: spec.to_string(),
            detail: crate::copy::side::one_line(&e),
        })?;
        Ok(PubSubSource {
            client,
            subscription,
        })
    }

    /// Pulls until the task is dropped; a broken stream is reopened with a growing pause.
    pub async fn pump(self, target: Target, stats: Arc<SourceStats>) {
        let scope = target.scope();
        let mut failures = 0u32;
        loop {
            let mut stream = self
                .client
                .subscribe(self.subscription.clone())
                .set_max_outstanding_messages(1000)
                .build();
            while let Some(item) = stream.next().await {
                let (m, h) = match item {
                    Ok(x) => x,
                    Err(e) => {
                        failures += 1;
                        tracing::warn!(subscription = %self.subscription, error = %crate::copy::side::one_line(&e), "Pub/Sub pull failed");
                        break;
                    }
                };
                failures = 0;
                stats.messages.fetch_add(1, Relaxed);
                let mut routed = Routed::default();
                match super::parse_gcs(&m.attributes, &m.data) {
                    Ok(parsed) => routed.add(parsed, &scope, "gs"),
                    Err(e) => routed.dead.push(e.to_string()),
                }
                let raw = raw_message(&m.attributes, &m.data);
                match target.store("pubsub", raw.as_bytes(), routed, &stats).await {
                    // at-least-once or exactly-once alike: a lost ack only means a redelivery
                    Ok(()) => h.ack(),
                    Err(e) => {
                        tracing::error!(error = %e, "could not store Pub/Sub events; they will be redelivered");
                        h.nack();
                    }
                }
            }
            let delay = Duration::from_millis((200u64 << failures.min(7)).min(30_000));
            tokio::time::sleep(delay).await;
        }
    }
}

/// What a dead letter keeps of a pulled message: its attributes and data as JSON.
fn raw_message(attributes: &std::collections::HashMap<String, String>, data: &[u8]) -> String {
    serde_json::json!({
        "attributes": attributes,
        "data": String::from_utf8_lossy(data),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_names() {
        let table: &[(&str, Option<&str>)] = &[
            (
                "pubsub://projects/p1/subscriptions/gcs-events",
                Some("projects/p1/subscriptions/gcs-events"),
            ),
            ("pubsub://projects/p1/subscriptions/ab", None),
            ("pubsub://projects//subscriptions/abc", None),
            ("pubsub://projects/p/topics/abc", None),
            ("pubsub://projects/p/subscriptions/abc/x", None),
            ("pubsub://projects/p/subscriptions/a b c", None),
            ("sqs://projects/p/subscriptions/abc", None),
        ];
        for (spec, want) in table {
            assert_eq!(subscription_name(spec).ok().as_deref(), *want, "{spec}");
        }
    }
}
