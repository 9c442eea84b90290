//! GCS notifications from a Pub/Sub pull subscription, through Google's client
//! (google-cloud-pubsub): one streaming pull, whose leases the client extends while a message
//! is held; each message's events are stored in the inbox, and only then is it acked (ack after
//! commit, rule 2 of docs/ARCHITECTURE.md). A message that could not be stored is nacked, so Pub/Sub
//! delivers it again. Unparseable messages and events of another bucket become dead letters
//! and are acked.
//!
//! `pubsub://projects/P/subscriptions/S`. Credentials: Google's application default
//! credentials (`GOOGLE_APPLICATION_CREDENTIALS`, workload identity, …). With
//! `PUBSUB_EMULATOR_HOST=host:port` (the variable Google's tools use for the emulator) slate
//! talks plain HTTP/2 to the emulator without credentials.

use google_cloud_pubsub::client::Subscriber;
use google_cloud_pubsub::subscriber::handler::Handler;
use google_cloud_pubsub::subscriber::MessageStream;

use super::source::{Message, Source};
use crate::core::error::{Result, SlateError};

/// One pull subscription.
pub struct PubSubSource {
    client: Subscriber,
    subscription: String,
    spec: String,
    /// The streaming pull, opened at the first receive and again after it breaks.
    stream: Option<MessageStream>,
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
            detail: crate::stores::side::one_line(&e),
        })?;
        Ok(PubSubSource {
            client,
            subscription,
            spec: spec.to_string(),
            stream: None,
        })
    }
}

/// Messages taken at once from the stream when more are ready.
const BATCH: usize = 500;

#[async_trait::async_trait]
impl Source for PubSubSource {
    type Ack = Handler;

    fn name(&self) -> &'static str {
        "pubsub"
    }

    fn spec(&self) -> &str {
        &self.spec
    }

    /// Waits for one message on the streaming pull, then takes whatever else is already
    /// there (up to [`BATCH`]), so that a burst is stored in one transaction.
    async fn next_batch(&mut self) -> Result<Vec<Message<Handler>>> {
        let stream = self.stream.get_or_insert_with(|| {
            self.client
                .subscribe(self.subscription.clone())
                .set_max_outstanding_messages(1000)
                .build()
        });
        let mut out = Vec::new();
        let first = stream.next().await;
        let mut item = first;
        loop {
            match item {
                Some(Ok((m, h))) => {
                    let parsed =
                        super::parse_gcs(&m.attributes, &m.data).map_err(|e| e.to_string());
                    out.push(Message {
                        raw: raw_message(&m.attributes, &m.data).into_bytes(),
                        parsed,
                        ack: h,
                    });
                }
                Some(Err(e)) => {
                    // the stream is broken: a new one is opened at the next call
                    self.stream = None;
                    if out.is_empty() {
                        return Err(SlateError::Store {
                            url: self.spec.clone(),
                            detail: crate::stores::side::one_line(&e),
                        });
                    }
                    return Ok(out);
                }
                None => {
                    self.stream = None;
                    return Ok(out);
                }
            }
            if out.len() >= BATCH {
                return Ok(out);
            }
            let Some(stream) = self.stream.as_mut() else {
                return Ok(out);
            };
            match futures::FutureExt::now_or_never(stream.next()) {
                Some(next) => item = next,
                None => return Ok(out),
            }
        }
    }

    /// At-least-once or exactly-once alike: a lost ack only means a redelivery.
    async fn ack(&mut self, acks: Vec<Handler>) -> usize {
        for h in acks {
            h.ack();
        }
        0
    }

    async fn nack(&mut self, acks: Vec<Handler>) {
        for h in acks {
            h.nack();
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
