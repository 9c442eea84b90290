//! GCS notifications from a Pub/Sub pull subscription, through Pub/Sub's REST API: `pull`
//! returns a batch of messages, their events are stored in the inbox, and only then are they
//! acknowledged (`acknowledge`: ack after commit, rule 2 of docs/ARCHITECTURE.md). A message that could not be
//! stored is nacked (`modifyAckDeadline` to 0), so Pub/Sub delivers it again. Unparseable
//! messages and events of another bucket become dead letters and are acked.
//!
//! Unary pulls, not a streaming pull: each pull ends by itself, so a consumer that goes away
//! (a restart, a crash) leaves nothing behind that keeps taking messages. Slate used Google's
//! streaming-pull client before, whose stream has no deadline; the Pub/Sub emulator never sees
//! such a stream end (its gRPC server throws on the client's RST_STREAM), keeps pushing to it a
//! share of every later burst and holds each of those messages for the stream's 60 s ack
//! deadline, so the tail of a burst reached a restarted daemon 60, 120, 180 s late.
//!
//! Against Google: long polls (`returnImmediately` false) that the server ends within
//! [`LONG_POLL`] (`X-Server-Timeout`). Against the emulator (`PUBSUB_EMULATOR_HOST=host:port`,
//! plain HTTP, no credentials) an abandoned long poll lives on too and would take the next
//! messages for the subscription's ack deadline, so slate asks with `returnImmediately` true.
//! After an empty answer slate pauses, 100 ms doubling up to 250 ms (an idle subscription
//! costs the emulator four pulls a second; the wait adds at most a quarter second).
//!
//! `pubsub://projects/P/subscriptions/S`. Credentials: Google's application default
//! credentials (`GOOGLE_APPLICATION_CREDENTIALS`, workload identity, …).

use std::collections::HashMap;
use std::time::Duration;

use super::source::{Message, Source};
use super::text::base64_decode;
use crate::core::error::{Result, SlateError};

/// Pub/Sub's REST endpoint (outside the emulator).
const ENDPOINT: &str = "https://pubsub.googleapis.com";
/// Messages asked for per pull (Pub/Sub's maximum; the emulator answers at most 100).
const BATCH: usize = 1000;
/// Ack ids per `acknowledge` / `modifyAckDeadline` request.
const ACK_CHUNK: usize = 1000;
/// How long Google may hold a pull open while no message is there.
const LONG_POLL: Duration = Duration::from_secs(30);
/// Every request but a long poll: its whole time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The pause after an empty pull: from, up to.
const IDLE_MIN: Duration = Duration::from_millis(100);
const IDLE_MAX: Duration = Duration::from_millis(250);

/// The largest answer read from the Pub/Sub API: a pull of `BATCH` messages (each
/// over the parsers' 1 MiB limit is a dead letter anyway, but is read whole to be kept), in
/// base64.
const MAX_ANSWER: usize = 64 << 20;

/// Characters of a project or subscription id that go into the URL path as they are.
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// One pull subscription.
pub struct PubSubSource {
    http: reqwest::Client,
    /// `{endpoint}/v1/projects/P/subscriptions/S`: safe to show.
    url: String,
    spec: String,
    /// Where the API is, and Google's application default credentials (none against the
    /// emulator).
    endpoint: Endpoint,
    /// Short polls (the emulator) rather than long ones (Google).
    emulator: bool,
    /// The pause after the next empty pull.
    idle: Duration,
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

/// The subscription's REST resource under `endpoint`, its ids percent-encoded.
fn resource_url(endpoint: &str, subscription: &str) -> String {
    format!(
        "{}{}",
        endpoint.trim_end_matches('/'),
        resource_path(subscription)
    )
}

/// The REST path of `projects/P/KIND/ID` (a topic, a subscription): `/v1/projects/P/KIND/ID`,
/// the ids percent-encoded.
pub(crate) fn resource_path(name: &str) -> String {
    let enc = |s: &str| percent_encoding::utf8_percent_encode(s, PATH_SEGMENT).to_string();
    let parts: Vec<&str> = name.split('/').collect();
    let (project, kind, id) = match parts.as_slice() {
        [_, p, k, i] => (*p, *k, *i),
        _ => ("", "subscriptions", name),
    };
    format!("/v1/projects/{}/{}/{}", enc(project), enc(kind), enc(id))
}

/// Where Pub/Sub's REST API is and how it is authorised: the emulator
/// (`PUBSUB_EMULATOR_HOST`, plain HTTP, no credentials) or Google's endpoint with the
/// application default credentials. Shared by the pull source and `slate events setup`.
pub(crate) struct Endpoint {
    /// `https://pubsub.googleapis.com` or the emulator's `http://HOST:PORT`.
    pub url: String,
    /// `None` against the emulator.
    pub credentials: Option<google_cloud_auth::credentials::Credentials>,
    pub emulator: bool,
}

impl Endpoint {
    /// From the environment; the error is one line, without a secret.
    pub(crate) fn from_env() -> std::result::Result<Endpoint, String> {
        let emulator = std::env::var("PUBSUB_EMULATOR_HOST")
            .ok()
            .filter(|h| !h.is_empty());
        Ok(match emulator {
            Some(host) if host.contains("://") => Endpoint {
                url: host,
                credentials: None,
                emulator: true,
            },
            Some(host) => Endpoint {
                url: format!("http://{host}"),
                credentials: None,
                emulator: true,
            },
            None => Endpoint {
                url: ENDPOINT.to_string(),
                credentials: Some(
                    google_cloud_auth::credentials::Builder::default()
                        .build()
                        .map_err(|e| {
                            format!("credentials: {}", crate::stores::side::one_line(&e))
                        })?,
                ),
                emulator: false,
            },
        })
    }

    /// The headers that authorise a request (the access token: never logged, never in an
    /// error); none against the emulator.
    pub(crate) async fn auth_headers(
        &self,
    ) -> std::result::Result<Option<http::HeaderMap>, String> {
        let Some(c) = &self.credentials else {
            return Ok(None);
        };
        match c.headers(http::Extensions::new()).await {
            Ok(google_cloud_auth::credentials::CacheableResource::New { data, .. }) => {
                Ok(Some(data))
            }
            Ok(google_cloud_auth::credentials::CacheableResource::NotModified) => {
                Err("credentials: no headers".into())
            }
            Err(e) => Err(format!(
                "credentials: {}",
                crate::stores::side::one_line(&e)
            )),
        }
    }
}

impl PubSubSource {
    /// Resolves `pubsub://projects/P/subscriptions/S` to an endpoint and credentials (the
    /// first pull makes the first connection).
    pub async fn connect(spec: &str) -> Result<PubSubSource> {
        let subscription = subscription_name(spec)?;
        let err = |detail: String| SlateError::Queue {
            url: spec.to_string(),
            detail,
        };
        let endpoint = Endpoint::from_env().map_err(err)?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| err(e.without_url().to_string()))?;
        Ok(PubSubSource {
            http,
            url: resource_url(&endpoint.url, &subscription),
            spec: spec.to_string(),
            emulator: endpoint.emulator,
            endpoint,
            idle: IDLE_MIN,
        })
    }

    /// `POST {url}:{verb}` with a JSON body; the JSON answer of a 2xx. `hold`: how long the
    /// server may wait before it answers (a long poll).
    async fn call(
        &self,
        verb: &str,
        body: serde_json::Value,
        hold: Option<Duration>,
    ) -> Result<serde_json::Value> {
        let err = |detail: String| SlateError::Queue {
            url: self.spec.clone(),
            detail: format!("{verb}: {detail}"),
        };
        let mut req = self
            .http
            .post(format!("{}:{verb}", self.url))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .timeout(hold.map_or(REQUEST_TIMEOUT, |h| h + REQUEST_TIMEOUT));
        if let Some(h) = hold {
            req = req.header("x-server-timeout", h.as_secs().to_string());
        }
        if let Some(h) = self.endpoint.auth_headers().await.map_err(err)? {
            req = req.headers(h);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| err(crate::stores::side::one_line(&e.without_url())))?;
        let status = resp.status();
        // read in pieces up to a bound: a pull's answer is as big as the messages in it, and a
        // server (or something posing as one) must not make this process read without end
        let mut resp = resp;
        let mut body = Vec::new();
        while let Some(piece) = resp
            .chunk()
            .await
            .map_err(|e| err(crate::stores::side::one_line(&e.without_url())))?
        {
            if body.len() + piece.len() > MAX_ANSWER {
                return Err(err(format!(
                    "HTTP {status}: an answer over {MAX_ANSWER} bytes; refused"
                )));
            }
            body.extend_from_slice(&piece);
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        if status.is_success() {
            if text.trim().is_empty() {
                return Ok(serde_json::Value::Object(Default::default()));
            }
            return serde_json::from_str(&text)
                .map_err(|e| err(format!("HTTP {status}: not JSON: {e}")));
        }
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let code = v["error"]["status"].as_str().unwrap_or_default();
        // a long poll that saw nothing until its deadline: an empty answer
        if hold.is_some() && (status.as_u16() == 504 || code == "DEADLINE_EXCEEDED") {
            return Ok(serde_json::Value::Object(Default::default()));
        }
        let message =
            crate::core::error::first_line(v["error"]["message"].as_str().unwrap_or_default());
        let what = match status.as_u16() {
            404 => "the subscription does not exist".to_string(),
            401 | 403 => format!("access denied: {message}"),
            s => format!("HTTP {s} {code} {message}").trim_end().to_string(),
        };
        Err(err(what))
    }

    /// Sends `ack_ids` to `verb` (with `extra` fields), ACK_CHUNK at a time; how many ids
    /// were in requests that failed.
    async fn send_ids(
        &self,
        verb: &str,
        ack_ids: Vec<String>,
        extra: &[(&str, serde_json::Value)],
    ) -> usize {
        let mut failed = 0;
        for chunk in ack_ids.chunks(ACK_CHUNK) {
            let mut body = serde_json::json!({ "ackIds": chunk });
            for (k, v) in extra {
                body[*k] = v.clone();
            }
            if let Err(e) = self.call(verb, body, None).await {
                tracing::warn!(spec = %self.spec, error = %e, ids = chunk.len(), "pubsub {verb} failed");
                failed += chunk.len();
            }
        }
        failed
    }
}

#[async_trait::async_trait]
impl Source for PubSubSource {
    /// The message's ack id.
    type Ack = String;

    fn name(&self) -> &'static str {
        "pubsub"
    }

    fn spec(&self) -> &str {
        &self.spec
    }

    /// One pull: whatever is there (up to [`BATCH`]), so that a burst is stored in one
    /// transaction. Empty after a long poll that saw nothing, or after the idle pause.
    async fn next_batch(&mut self) -> Result<Vec<Message<String>>> {
        crate::stores::requests::count_receive();
        let body = serde_json::json!({
            "maxMessages": BATCH,
            "returnImmediately": self.emulator,
        });
        let hold = (!self.emulator).then_some(LONG_POLL);
        let answer = self.call("pull", body, hold).await?;
        let received = match &answer["receivedMessages"] {
            serde_json::Value::Array(a) => a.as_slice(),
            serde_json::Value::Null => &[],
            _ => {
                return Err(SlateError::Queue {
                    url: self.spec.clone(),
                    detail: "pull: receivedMessages is not a list".into(),
                })
            }
        };
        let mut out = Vec::with_capacity(received.len());
        for r in received {
            let Some(ack_id) = r["ackId"].as_str().filter(|a| !a.is_empty()) else {
                // cannot be acked: Pub/Sub delivers it again after its ack deadline
                tracing::warn!(spec = %self.spec, "a pulled message without an ack id");
                continue;
            };
            let (raw, parsed) = decode(&r["message"]);
            out.push(Message {
                raw,
                decoded: None,
                parsed,
                ack: ack_id.to_string(),
            });
        }
        if out.is_empty() {
            tokio::time::sleep(self.idle).await;
            self.idle = (self.idle * 2).min(IDLE_MAX);
        } else {
            self.idle = IDLE_MIN;
        }
        Ok(out)
    }

    /// At-least-once or exactly-once alike: a lost ack only means a redelivery.
    async fn ack(&mut self, acks: Vec<String>) -> usize {
        self.send_ids("acknowledge", acks, &[]).await
    }

    /// An ack deadline of 0: Pub/Sub delivers the messages again at once.
    async fn nack(&mut self, acks: Vec<String>) {
        let zero = [("ackDeadlineSeconds", serde_json::json!(0))];
        self.send_ids("modifyAckDeadline", acks, &zero).await;
    }
}

/// A pulled message (`{"data": base64, "attributes": {…}, …}`): what a dead letter keeps of
/// it, and what the GCS parser made of it.
fn decode(message: &serde_json::Value) -> (Vec<u8>, std::result::Result<super::Parsed, String>) {
    let mut attributes = HashMap::new();
    let mut problem = None;
    match &message["attributes"] {
        serde_json::Value::Object(map) => {
            for (name, value) in map {
                match value.as_str() {
                    Some(v) => {
                        attributes.insert(name.clone(), v.to_string());
                    }
                    None => {
                        let shown: String = name.chars().take(40).collect();
                        problem = Some(format!("message.attributes.{shown}: expected a string"));
                    }
                }
            }
        }
        serde_json::Value::Null => {}
        _ => problem = Some("message.attributes: expected an object".to_string()),
    }
    let data = match &message["data"] {
        serde_json::Value::String(b64) => base64_decode(b64).unwrap_or_else(|| {
            problem.get_or_insert_with(|| "message.data: not base64".to_string());
            b64.as_bytes().to_vec()
        }),
        serde_json::Value::Null => Vec::new(),
        _ => {
            problem.get_or_insert_with(|| "message.data: expected a string".to_string());
            Vec::new()
        }
    };
    if !message.is_object() {
        problem = Some("message: missing".to_string());
    }
    let raw = raw_message(&attributes, &data).into_bytes();
    let parsed = match problem {
        Some(p) => Err(p),
        None => super::parse_gcs(&attributes, &data).map_err(|e| e.to_string()),
    };
    (raw, parsed)
}

/// What a dead letter keeps of a pulled message: its attributes and data as JSON.
fn raw_message(attributes: &HashMap<String, String>, data: &[u8]) -> String {
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

    #[test]
    fn resource_urls_keep_ids_intact() {
        assert_eq!(
            resource_url(
                "http://127.0.0.1:8085/",
                "projects/p1/subscriptions/gcs-events"
            ),
            "http://127.0.0.1:8085/v1/projects/p1/subscriptions/gcs-events"
        );
        assert_eq!(
            resource_url(ENDPOINT, "projects/p-1/subscriptions/a.b~c_d+e%f"),
            "https://pubsub.googleapis.com/v1/projects/p-1/subscriptions/a.b~c_d%2Be%25f"
        );
        assert_eq!(
            resource_path("projects/p1/topics/t+1"),
            "/v1/projects/p1/topics/t%2B1"
        );
    }

    fn finalize(data: &str) -> serde_json::Value {
        serde_json::json!({
            "attributes": {
                "eventType": "OBJECT_FINALIZE", "payloadFormat": "JSON_API_V1",
                "bucketId": "b", "objectId": "dir/k.bin", "objectGeneration": "7",
            },
            "data": data,
            "messageId": "1",
        })
    }

    #[test]
    fn pulled_messages_decode_or_say_why_not() {
        let object = r#"{"name": "dir/k.bin", "bucket": "b", "generation": "7", "size": "3"}"#;
        let b64 = super::super::text::base64_encode(object.as_bytes());
        let (raw, parsed) = decode(&finalize(&b64));
        match parsed {
            Ok(super::super::Parsed::Events(events)) => {
                assert_eq!(events.len(), 1);
                assert_eq!(events[0].key, "dir/k.bin");
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        let raw = String::from_utf8(raw).expect("utf-8");
        assert!(
            raw.contains("dir/k.bin") && raw.contains(r#"\"size\": \"3\""#),
            "{raw}"
        );

        let cases: &[(serde_json::Value, &str)] = &[
            (finalize("not base64!"), "message.data: not base64"),
            (
                serde_json::json!({"attributes": {"a": 1}, "data": ""}),
                "message.attributes.a: expected a string",
            ),
            (
                serde_json::json!({"attributes": [], "data": ""}),
                "message.attributes: expected an object",
            ),
            (
                serde_json::json!({"data": 5}),
                "message.data: expected a string",
            ),
            (serde_json::Value::Null, "message: missing"),
        ];
        for (message, why) in cases {
            let (_, parsed) = decode(message);
            assert_eq!(parsed.err().as_deref(), Some(*why), "{message}");
        }
        // no attributes: the GCS parser says which one is missing
        let (_, parsed) = decode(&serde_json::json!({"data": ""}));
        assert!(parsed.err().is_some_and(|e| e.contains("eventType")));
    }
}
