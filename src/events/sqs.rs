//! S3 change events from an SQS queue (aws-sdk-sqs): long-poll batch receive (4 receives in
//! flight), parse with [`super::parse_s3`], store in the inbox, and only then delete the
//! messages (ack after commit, DESIGN.md rule 2). Because a message is deleted as soon as its
//! events are durable, not after the copy, no visibility extension is needed however long a
//! copy takes.
//! Unparseable messages and events for another bucket or prefix become dead letters.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use aws_sdk_sqs::Client;

use super::route::{Routed, SourceStats, Target};
use crate::error::{Result, SlateError};

/// A queue to receive from.
pub struct SqsSource {
    client: Client,
    queue_url: String,
    /// Long-poll wait per receive.
    pub wait: Duration,
    /// Receives in flight at once: one receive returns at most 10 messages, so intake per
    /// queue is about 10 × receivers per round trip.
    pub receivers: usize,
}

fn sqs_err(spec: &str, e: impl std::fmt::Display) -> SlateError {
    SlateError::Store {
        url: spec.to_string(),
        detail: crate::copy::side::one_line(&sdk_error_text(e)),
    }
}

/// An AWS SDK error as text, without what AWS echoes of the request: a `SignatureDoesNotMatch`
/// message carries "The Canonical String for this request should have been …", the signed
/// headers with their values, `x-amz-security-token` (the session token) among them. Everything
/// from there on (the rest of the message and the raw response) is left out.
fn sdk_error_text(e: impl std::fmt::Display) -> String {
    let text = e.to_string();
    match text.find("The Canonical String for this request") {
        Some(at) => format!(
            "{}[the canonical request AWS echoed is not shown: it holds credentials]",
            &text[..at]
        ),
        None => text,
    }
}

impl SqsSource {
    /// Connects to `sqs://QUEUE_NAME` or `sqs://https://…` (a queue URL; a plain queue URL is
    /// accepted too). Region, credentials and endpoint come from the AWS SDK's usual
    /// environment (`AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, …).
    pub async fn connect(spec: &str) -> Result<SqsSource> {
        let rest = spec.strip_prefix("sqs://").unwrap_or(spec);
        if rest.is_empty() {
            return Err(SlateError::BadUrl {
                url: spec.to_string(),
                why: "missing queue name or URL".into(),
            });
        }
        let region =
            aws_config::meta::region::RegionProviderChain::default_provider().or_else("us-east-1");
        let conf = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(region)
            .load()
            .await;
        let client = Client::new(&conf);
        let queue_url = if rest.starts_with("http://") || rest.starts_with("https://") {
            rest.to_string()
        } else {
            client
                .get_queue_url()
                .queue_name(rest)
                .send()
                .await
                .map_err(|e| sqs_err(spec, aws_sdk_sqs::error::DisplayErrorContext(e)))?
                .queue_url
                .ok_or_else(|| sqs_err(spec, "the queue has no URL"))?
        };
        Ok(SqsSource {
            client,
            queue_url,
            wait: Duration::from_secs(5),
            receivers: 4,
        })
    }

    /// Receives until the task is dropped: every message's events are stored in `target`'s
    /// inbox, then the batch is deleted from the queue.
    pub async fn pump(self, target: Target, stats: Arc<SourceStats>) {
        let loops = (0..self.receivers.max(1)).map(|_| self.receive_loop(&target, &stats));
        futures::future::join_all(loops).await;
    }

    /// One receiver: long-poll, store, delete, again.
    async fn receive_loop(&self, target: &Target, stats: &SourceStats) {
        let scope = target.scope();
        let mut failures = 0u32;
        loop {
            let out = self
                .client
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(10)
                .wait_time_seconds(self.wait.as_secs() as i32)
                .send()
                .await;
            let msgs = match out {
                Ok(o) => {
                    failures = 0;
                    o.messages.unwrap_or_default()
                }
                Err(e) => {
                    failures += 1;
                    let delay = Duration::from_millis((200u64 << failures.min(7)).min(30_000));
                    tracing::warn!(error = %sdk_error_text(aws_sdk_sqs::error::DisplayErrorContext(e)), delay_ms = delay.as_millis() as u64, "SQS receive failed");
                    tokio::time::sleep(delay).await;
                    continue;
                }
            };
            if msgs.is_empty() {
                continue;
            }
            stats.messages.fetch_add(msgs.len() as u64, Relaxed);
            let mut acks = Vec::new();
            let mut batch = Vec::with_capacity(msgs.len());
            for (i, m) in msgs.into_iter().enumerate() {
                let body = m.body.unwrap_or_default();
                let mut routed = Routed::default();
                match super::parse_s3(&body) {
                    Ok(parsed) => routed.add(parsed, &scope, "s3"),
                    Err(e) => routed.dead.push(e.to_string()),
                }
                batch.push((body.into_bytes(), routed));
                if let Some(h) = m.receipt_handle {
                    acks.push(
                        DeleteMessageBatchRequestEntry::builder()
                            .id(i.to_string())
                            .receipt_handle(h)
                            .build(),
                    );
                }
            }
            if let Err(e) = target.store_batch("sqs", batch, stats).await {
                // not stored: not acknowledged, so SQS delivers the messages again
                tracing::error!(error = %e, "could not store SQS events; they will be redelivered");
                continue;
            }
            let acks = acks.into_iter().flatten().collect::<Vec<_>>();
            if acks.is_empty() {
                continue;
            }
            if let Err(e) = self
                .client
                .delete_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(acks))
                .send()
                .await
            {
                // stored already: a redelivery only repeats a harmless, coalesced event
                tracing::warn!(error = %sdk_error_text(aws_sdk_sqs::error::DisplayErrorContext(e)), "SQS delete failed");
            }
        }
    }
}
