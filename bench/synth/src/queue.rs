//! An SQS-compatible queue of the store's own (the JSON protocol the AWS SDKs speak, on the
//! admin port), fed with S3-style event notifications of every change made to the source, so
//! that a daemon can be measured at rates moto's SQS cannot deliver.
//!
//! Semantics kept from SQS where slate relies on them: a received message is invisible for its
//! visibility timeout and comes back unless deleted; ReceiveMessage returns at most 10 and
//! waits up to `WaitTimeSeconds` (≤ 20) for one; DeleteMessageBatch reports each entry.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use s3s::crypto::{Checksum, Md5};
use serde_json::{json, Value};

use crate::model::hex;

struct InFlight {
    id: String,
    body: String,
    visible_at: Instant,
}

#[derive(Default)]
struct State {
    ready: VecDeque<(String, String)>,
    in_flight: HashMap<String, InFlight>,
    next: u64,
    sequencer: u64,
    sent: u64,
    deleted: u64,
}

/// The queue (one, named `name`).
pub struct Queue {
    pub name: String,
    state: Mutex<State>,
    arrived: tokio::sync::Notify,
}

/// S3's form encoding of a key in an event: spaces as `+`, everything else not unreserved as
/// `%XX` of its UTF-8 bytes.
fn encode_key(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn rfc3339_now() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let (secs, ms) = (d.as_secs(), d.subsec_millis());
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // civil from days (Howard Hinnant's algorithm)
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

impl Queue {
    pub fn new(name: &str) -> Queue {
        Queue {
            name: name.to_string(),
            state: Mutex::new(State::default()),
            arrived: tokio::sync::Notify::new(),
        }
    }

    fn push(&self, body: String) {
        if let Ok(mut s) = self.state.lock() {
            s.next += 1;
            let id = format!("synth-msg-{}", s.next);
            s.ready.push_back((id, body));
            s.sent += 1;
        }
        self.arrived.notify_waiters();
    }

    /// An S3 event notification for `key` of `bucket`: created (with its size and ETag) or
    /// removed.
    pub fn s3_event(&self, bucket: &str, key: &str, created: Option<(u64, &str)>) {
        let seq = match self.state.lock() {
            Ok(mut s) => {
                s.sequencer += 1;
                s.sequencer
            }
            Err(_) => return,
        };
        let (name, object) = match created {
            Some((size, etag)) => (
                "ObjectCreated:Put",
                json!({"key": encode_key(key), "size": size, "eTag": etag,
                       "sequencer": format!("{seq:018X}")}),
            ),
            None => (
                "ObjectRemoved:Delete",
                json!({"key": encode_key(key), "sequencer": format!("{seq:018X}")}),
            ),
        };
        let record = json!({"Records": [{
            "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
            "eventTime": rfc3339_now(), "eventName": name,
            "s3": {"s3SchemaVersion": "1.0", "configurationId": "synth",
                   "bucket": {"name": bucket, "arn": format!("arn:aws:s3:::{bucket}")},
                   "object": object}
        }]});
        self.push(record.to_string());
    }

    /// Messages sent, deleted, waiting, in flight.
    pub fn stats(&self) -> Value {
        match self.state.lock() {
            Ok(s) => json!({"sent": s.sent, "deleted": s.deleted, "ready": s.ready.len(),
                            "in_flight": s.in_flight.len()}),
            Err(_) => json!({}),
        }
    }

    fn take(&self, max: usize, visibility: Duration) -> Vec<Value> {
        let Ok(mut s) = self.state.lock() else {
            return Vec::new();
        };
        let now = Instant::now();
        // what was received and not deleted in time comes back
        let expired: Vec<String> = s
            .in_flight
            .iter()
            .filter(|(_, f)| f.visible_at <= now)
            .map(|(h, _)| h.clone())
            .collect();
        for h in expired {
            if let Some(f) = s.in_flight.remove(&h) {
                s.ready.push_front((f.id, f.body));
            }
        }
        let mut out = Vec::new();
        while out.len() < max {
            let Some((id, body)) = s.ready.pop_front() else {
                break;
            };
            s.next += 1;
            let handle = format!("{id}.{}", s.next);
            let mut md5 = Md5::new();
            md5.update(body.as_bytes());
            out.push(json!({"MessageId": id, "ReceiptHandle": handle,
                            "MD5OfBody": hex(&md5.finalize()), "Body": body}));
            s.in_flight.insert(
                handle,
                InFlight {
                    id,
                    body,
                    visible_at: now + visibility,
                },
            );
        }
        out
    }

    /// One SQS JSON-protocol request (`X-Amz-Target: AmazonSQS.OP`): the answer's status and
    /// body.
    pub async fn answer(&self, op: &str, body: &[u8], queue_url: &str) -> (u16, Value) {
        let req: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        match op {
            "GetQueueUrl" if req["QueueName"].as_str() != Some(self.name.as_str()) => (
                400,
                json!({"__type": "com.amazonaws.sqs#QueueDoesNotExist",
                       "message": format!("no queue {}; this one is {}", req["QueueName"], self.name)}),
            ),
            "GetQueueUrl" | "CreateQueue" => (200, json!({"QueueUrl": queue_url})),
            "SendMessage" => {
                let b = req["MessageBody"].as_str().unwrap_or_default().to_string();
                self.push(b);
                (200, json!({"MessageId": "sent"}))
            }
            "ReceiveMessage" => {
                let max = req["MaxNumberOfMessages"]
                    .as_u64()
                    .unwrap_or(1)
                    .clamp(1, 10) as usize;
                let wait = req["WaitTimeSeconds"].as_u64().unwrap_or(0).min(20);
                let vis = Duration::from_secs(req["VisibilityTimeout"].as_u64().unwrap_or(30));
                let deadline = Instant::now() + Duration::from_secs(wait);
                loop {
                    let arrived = self.arrived.notified();
                    let got = self.take(max, vis);
                    if !got.is_empty() || Instant::now() >= deadline {
                        return (200, json!({"Messages": got}));
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    // a message may come back from in flight: look again at least each second
                    let _ = tokio::time::timeout(left.min(Duration::from_secs(1)), arrived).await;
                }
            }
            "DeleteMessage" | "DeleteMessageBatch" => {
                let entries: Vec<Value> = match op {
                    "DeleteMessage" => {
                        vec![json!({"Id": "0", "ReceiptHandle": req["ReceiptHandle"]})]
                    }
                    _ => req["Entries"].as_array().cloned().unwrap_or_default(),
                };
                let mut ok = Vec::new();
                let mut failed = Vec::new();
                if let Ok(mut s) = self.state.lock() {
                    for e in entries {
                        let h = e["ReceiptHandle"].as_str().unwrap_or_default();
                        match s.in_flight.remove(h) {
                            Some(_) => {
                                s.deleted += 1;
                                ok.push(json!({"Id": e["Id"]}));
                            }
                            None => failed
                                .push(json!({"Id": e["Id"], "Code": "ReceiptHandleIsInvalid",
                                                       "SenderFault": true})),
                        }
                    }
                }
                (200, json!({"Successful": ok, "Failed": failed}))
            }
            "PurgeQueue" => {
                if let Ok(mut s) = self.state.lock() {
                    s.ready.clear();
                    s.in_flight.clear();
                }
                (200, json!({}))
            }
            "GetQueueAttributes" => {
                let st = self.stats();
                (
                    200,
                    json!({"Attributes": {
                    "ApproximateNumberOfMessages": st["ready"].to_string(),
                    "ApproximateNumberOfMessagesNotVisible": st["in_flight"].to_string()}}),
                )
            }
            _ => (
                400,
                json!({"__type": "com.amazonaws.sqs#InvalidAction",
                       "message": format!("synth-s3's queue does not do {op}")}),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_form_encoded_as_s3_does() {
        assert_eq!(encode_key("a b/ü+c"), "a+b/%C3%BC%2Bc");
    }

    #[tokio::test]
    async fn a_received_message_is_hidden_then_deleted_or_back() {
        let q = Queue::new("q");
        q.s3_event("b", "k 1", Some((5, "abc")));
        q.s3_event("b", "k2", None);
        let (_, a) = q
            .answer(
                "ReceiveMessage",
                br#"{"MaxNumberOfMessages":10,"VisibilityTimeout":0}"#,
                "u",
            )
            .await;
        let msgs = a["Messages"].as_array().cloned().unwrap_or_default();
        assert_eq!(msgs.len(), 2);
        assert!(msgs[0]["Body"].as_str().unwrap_or_default().contains("k+1"));
        // visibility 0: both come back
        let (_, b) = q
            .answer("ReceiveMessage", br#"{"MaxNumberOfMessages":1}"#, "u")
            .await;
        let h = b["Messages"][0]["ReceiptHandle"].clone();
        let del = json!({"Entries": [{"Id": "1", "ReceiptHandle": h}, {"Id": "2", "ReceiptHandle": "x"}]});
        let (_, d) = q
            .answer("DeleteMessageBatch", del.to_string().as_bytes(), "u")
            .await;
        assert_eq!(d["Successful"].as_array().map(Vec::len), Some(1));
        assert_eq!(d["Failed"].as_array().map(Vec::len), Some(1));
        assert_eq!(q.stats()["deleted"], 1);
        assert!(rfc3339_now().starts_with("20"));
    }
}
