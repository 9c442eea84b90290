//! S3 change events from an SQS queue (aws-sdk-sqs), as a [`Source`]: long-poll batch receive
//! (the daemon runs 4 receives in flight per queue), parse with [`super::parse_s3`]; the
//! consumer stores the events in the inbox, and only then are the messages deleted in one
//! batch (ack after commit, rule 2 of docs/ARCHITECTURE.md). Because a message is deleted as soon as its
//! events are durable, not after the copy, no visibility extension is needed however long a
//! copy takes.
//! Unparseable messages and events for another bucket or prefix become dead letters.

use std::time::Duration;

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use aws_sdk_sqs::Client;

use super::source::{Message, Source};
use crate::core::error::{Result, SlateError};

/// A queue to receive from. Clones share the client: a consumer runs several receives in
/// flight by running several clones.
#[derive(Clone)]
pub struct SqsSource {
    client: Client,
    queue_url: String,
    spec: String,
    /// Long-poll wait per receive.
    pub wait: Duration,
}

fn sqs_err(spec: &str, e: impl std::fmt::Display) -> SlateError {
    SlateError::Queue {
        url: spec.to_string(),
        detail: crate::stores::side::one_line(&sdk_error_text(e)),
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

/// An SQS client on the same credential chain and region as the S3 data path
/// (`stores::aws`): `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, ….
pub async fn client() -> Client {
    let conf = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(crate::stores::aws::region()))
        .credentials_provider(crate::stores::aws::chain())
        .load()
        .await;
    Client::new(&conf)
}

/// The error of an SQS call, as one line without what AWS echoes of the request.
pub fn error(spec: &str, e: impl std::error::Error + 'static) -> SlateError {
    sqs_err(spec, aws_sdk_sqs::error::DisplayErrorContext(e))
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
        let client = client().await;
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
            spec: spec.to_string(),
            wait: Duration::from_secs(5),
        })
    }
}

#[async_trait::async_trait]
impl Source for SqsSource {
    type Ack = String;

    fn name(&self) -> &'static str {
        "sqs"
    }

    fn spec(&self) -> &str {
        &self.spec
    }

    /// One long poll (up to 10 messages, the most SQS returns at once).
    async fn next_batch(&mut self) -> Result<Vec<Message<String>>> {
        crate::stores::requests::count_receive();
        let out = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(self.wait.as_secs() as i32)
            .send()
            .await
            .map_err(|e| sqs_err(&self.spec, aws_sdk_sqs::error::DisplayErrorContext(e)))?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| {
                // without a receipt handle a message cannot be deleted: it will come back
                let ack = m.receipt_handle?;
                let body = m.body.unwrap_or_default();
                let parsed = super::parse_s3(&body).map_err(|e| e.to_string());
                Some(Message {
                    raw: body.into_bytes(),
                    decoded: None,
                    parsed,
                    ack,
                })
            })
            .collect())
    }

    /// One DeleteMessageBatch; entries SQS reports as failed are counted (and come back).
    async fn ack(&mut self, acks: Vec<String>) -> usize {
        let total = acks.len();
        let entries: Vec<_> = acks
            .into_iter()
            .enumerate()
            .filter_map(|(i, h)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(h)
                    .build()
                    .ok()
            })
            .collect();
        let built = entries.len();
        if entries.is_empty() {
            return total;
        }
        match self
            .client
            .delete_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(out) => {
                let failed = out.failed.len();
                for f in &out.failed {
                    tracing::warn!(queue = %self.spec, code = %f.code, message = ?f.message,
                        "SQS could not delete a stored message; it will be delivered again");
                }
                failed + (total - built)
            }
            Err(e) => {
                // stored already: a redelivery only repeats a harmless, coalesced event
                tracing::warn!(error = %sdk_error_text(aws_sdk_sqs::error::DisplayErrorContext(e)), "SQS delete failed");
                total
            }
        }
    }
}
