//! Azure Blob events from an Azure Storage Queue, where an Event Grid subscription with a
//! Storage Queue endpoint delivers them (one event per message, base64 JSON, Event Grid schema
//! or CloudEvents 1.0). Slate signs the Queue REST calls itself (Shared Key with the account
//! key, or a SAS token), so it needs no Azure SDK: receive up to 32 messages at a time with a
//! visibility timeout, store their events in the inbox, then delete each message (ack after
//! commit, rule 2 of docs/ARCHITECTURE.md). A message whose events could not be stored becomes visible again
//! when its visibility timeout runs out and is received again.
//!
//! The answers' XML is read with quick-xml. Microsoft's `azure_storage_queue` 1.x is no
//! replacement: it authenticates with an Entra ID token or a SAS in the URL, and has no Shared
//! Key, which Azurite and account keys need.
//!
//! Azure queues have no long poll: an empty receive is followed by a pause that doubles from
//! 100 ms up to 500 ms (a quiet queue costs two requests a second, ~5.2 M a month, about
//! $2 at list price; a change reaching an idle daemon waits half a second at most, within the
//! one-second latency slate aims for).
//!
//! `azqueue://ACCOUNT/QUEUE`. Endpoint: `QueueEndpoint` of `AZURE_STORAGE_CONNECTION_STRING`,
//! else Azurite's (`AZURE_STORAGE_USE_EMULATOR=true` or `UseDevelopmentStorage=true`;
//! `AZURITE_QUEUE_STORAGE_URL` moves it, default `http://127.0.0.1:10001`), else
//! `https://ACCOUNT.queue.core.windows.net`. Credentials: the connection string's
//! `AccountKey` / `SharedAccessSignature`, `AZURE_STORAGE_ACCOUNT_KEY`, `AZURE_STORAGE_SAS_KEY`
//! (or `_SAS_TOKEN`), or Azurite's well-known key. A SAS URL sets endpoint and token at once:
//! `AZURE_STORAGE_QUEUE_SAS_URL` (a queue or account SAS URL of the queue service), or an
//! account SAS URL in `AZURE_STORAGE_SAS_URL` whose services include the queue (`ss=…q…`).

use std::time::Duration;

use futures::StreamExt;
use ring::hmac;

use super::source::{Message, Source};
use super::text::{base64_decode, base64_encode};
use crate::core::error::{Result, SlateError};
use crate::stores::{ConnectionString, SasUrl};

/// Azurite's account and key, published in Azure's documentation.
const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const API_VERSION: &str = "2021-12-02";
/// Messages per receive (the service's maximum).
const BATCH: usize = 32;
/// How long a received message stays invisible to other receivers.
const VISIBILITY_SECS: u32 = 60;

enum Auth {
    SharedKey {
        account: String,
        key: hmac::Key,
    },
    Sas(String),
    /// Entra ID (service principal, workload identity, managed identity, `az login`): the
    /// token object_store's Azure credential chain gets for storage, which covers queues too.
    Entra(object_store::azure::AzureCredentialProvider),
}

/// Whether the environment names an Entra ID credential (what object_store's Azure builder
/// takes from it).
fn entra_configured() -> bool {
    (env("AZURE_CLIENT_ID").is_some()
        && (env("AZURE_CLIENT_SECRET").is_some() || env("AZURE_FEDERATED_TOKEN_FILE").is_some()))
        || env("AZURE_FEDERATED_TOKEN_FILE").is_some()
        || env("AZURE_USE_AZURE_CLI").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || env("SLATE_USE_INSTANCE_METADATA").is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// One queue to receive from.
pub struct AzQueueSource {
    http: reqwest::Client,
    /// `…/QUEUE` without a query: safe to show.
    queue_url: String,
    /// The URL's path (for Shared Key's canonical resource).
    path: String,
    auth: Auth,
    spec: String,
    pub idle_min: Duration,
    pub idle_max: Duration,
    /// The pause after the next empty receive.
    idle: Duration,
}

/// One received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMessage {
    pub id: String,
    pub pop_receipt: String,
    pub text: String,
    pub dequeue_count: u32,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn bad(spec: &str, why: impl Into<String>) -> SlateError {
    SlateError::BadUrl {
        url: spec.to_string(),
        why: why.into(),
    }
}

impl AzQueueSource {
    /// Resolves `azqueue://ACCOUNT/QUEUE` to an endpoint and credentials (see the module
    /// documentation) and checks that the queue exists.
    pub async fn connect(spec: &str) -> Result<AzQueueSource> {
        let src = Self::open(spec)?;
        // the queue must exist (and the credentials work) before the daemon relies on it
        src.request(reqwest::Method::GET, "", &[("comp", "metadata")], "")
            .await?;
        Ok(src)
    }

    /// Resolves `azqueue://ACCOUNT/QUEUE` without a request.
    pub fn open(spec: &str) -> Result<AzQueueSource> {
        let rest = spec
            .strip_prefix("azqueue://")
            .ok_or_else(|| bad(spec, "expected azqueue://ACCOUNT/QUEUE"))?;
        let (account, queue) = rest
            .trim_end_matches('/')
            .split_once('/')
            .ok_or_else(|| bad(spec, "expected azqueue://ACCOUNT/QUEUE"))?;
        let valid_queue = (3..=63).contains(&queue.len())
            && queue
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if account.is_empty() || !valid_queue {
            return Err(bad(
                spec,
                "queue names are 3-63 lowercase letters, digits and '-' (azqueue://ACCOUNT/QUEUE)",
            ));
        }
        let cs = match env("AZURE_STORAGE_CONNECTION_STRING") {
            Some(s) => ConnectionString::parse(&s).map_err(|why| SlateError::Store {
                url: spec.to_string(),
                detail: format!("AZURE_STORAGE_CONNECTION_STRING: {why}"),
            })?,
            None => ConnectionString::default(),
        };
        let emulator = cs.dev_storage
            || env("AZURE_STORAGE_USE_EMULATOR").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        // a SAS URL for the queue (or an account SAS URL that covers the queue service): its
        // endpoint and token; an account SAS URL for Blob (AZURE_STORAGE_SAS_URL, `ss` naming
        // `q`) lends its token to the account's queue endpoint
        let sas_url = match env("AZURE_STORAGE_QUEUE_SAS_URL") {
            Some(u) => Some(SasUrl::parse(&u, "queue").map_err(|why| SlateError::Store {
                url: spec.to_string(),
                detail: format!("AZURE_STORAGE_QUEUE_SAS_URL: {why}"),
            })?),
            None => env("AZURE_STORAGE_SAS_URL")
                .and_then(|u| SasUrl::parse(&u, "blob").ok())
                .filter(|s| {
                    s.endpoint.contains(".blob.core.windows.net")
                        && s.token
                            .split('&')
                            .any(|kv| kv.starts_with("ss=") && kv.contains('q'))
                })
                .map(|s| SasUrl {
                    endpoint: s
                        .endpoint
                        .replace(".blob.core.windows.net", ".queue.core.windows.net"),
                    resource: None,
                    ..s
                }),
        };
        if let Some(s) = &sas_url {
            let wrong = if s.account != account {
                Some(format!("account '{}'", s.account))
            } else {
                s.resource
                    .as_deref()
                    .filter(|r| *r != queue)
                    .map(|r| format!("queue '{r}'"))
            };
            if let Some(w) = wrong {
                return Err(bad(spec, format!("the queue's SAS URL is for {w}")));
            }
        }
        let endpoint = if let Some(s) = &sas_url {
            s.endpoint.clone()
        } else if let Some(ep) = cs.queue_endpoint.clone() {
            ep
        } else if emulator {
            let base =
                env("AZURITE_QUEUE_STORAGE_URL").unwrap_or_else(|| "http://127.0.0.1:10001".into());
            format!("{}/{account}", base.trim_end_matches('/'))
        } else {
            format!("https://{account}.queue.core.windows.net")
        };
        let key = cs
            .key
            .clone()
            .or_else(|| env("AZURE_STORAGE_ACCOUNT_KEY"))
            .or_else(|| env("AZURE_STORAGE_ACCESS_KEY"));
        let sas = cs
            .sas
            .clone()
            .or_else(|| env("AZURE_STORAGE_SAS_KEY"))
            .or_else(|| env("AZURE_STORAGE_SAS_TOKEN"));
        // a SAS URL given for the queue is what the queue is reached with
        let key = if sas_url.is_some() { None } else { key };
        let sas = sas_url.map(|s| s.token).or(sas);
        let auth = match (key, sas) {
            (Some(k), _) => Auth::SharedKey {
                account: account.to_string(),
                key: hmac::Key::new(
                    hmac::HMAC_SHA256,
                    &base64_decode(&k).ok_or_else(|| SlateError::Store {
                        url: spec.to_string(),
                        detail: "the Azure account key is not base64".into(),
                    })?,
                ),
            },
            (None, Some(s)) => Auth::Sas(s.trim_start_matches('?').to_string()),
            (None, None) if emulator && account == AZURITE_ACCOUNT => Auth::SharedKey {
                account: account.to_string(),
                key: hmac::Key::new(
                    hmac::HMAC_SHA256,
                    &base64_decode(AZURITE_KEY).unwrap_or_default(),
                ),
            },
            (None, None) if entra_configured() => {
                // a client for the same account only for its credential chain (no request)
                let azure = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_account(account)
                    .with_container_name("queue-credentials")
                    .build()
                    .map_err(|e| SlateError::Store {
                        url: spec.to_string(),
                        detail: format!("Entra ID credentials: {e}"),
                    })?;
                Auth::Entra(azure.credentials().clone())
            }
            (None, None) => {
                return Err(SlateError::MissingCredentials {
                    url: spec.to_string(),
                    hint: "set AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT_KEY, \
                           AZURE_STORAGE_SAS_KEY or AZURE_STORAGE_QUEUE_SAS_URL, or an Entra ID \
                           identity (AZURE_CLIENT_ID with AZURE_CLIENT_SECRET or \
                           AZURE_FEDERATED_TOKEN_FILE, AZURE_USE_AZURE_CLI=true) (Azurite: \
                           AZURE_STORAGE_USE_EMULATOR=true)"
                        .into(),
                })
            }
        };
        let queue_url = format!("{}/{queue}", endpoint.trim_end_matches('/'));
        let parsed = url::Url::parse(&queue_url)
            .map_err(|e| bad(spec, format!("queue endpoint '{endpoint}': {e}")))?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| SlateError::Store {
                url: spec.to_string(),
                detail: e.without_url().to_string(),
            })?;
        Ok(AzQueueSource {
            http,
            path: parsed.path().to_string(),
            queue_url,
            auth,
            spec: spec.to_string(),
            idle_min: Duration::from_millis(100),
            idle_max: Duration::from_millis(500),
            idle: Duration::from_millis(100),
        })
    }

    /// Creates the queue (no error when it exists).
    pub async fn create(&self) -> Result<()> {
        self.request(reqwest::Method::PUT, "", &[], "")
            .await
            .map(|_| ())
    }

    /// Puts one message with `text` as its MessageText (as Event Grid does: base64 of the
    /// event's JSON).
    pub async fn send(&self, text: &str) -> Result<()> {
        let body = format!(
            "<QueueMessage><MessageText>{}</MessageText></QueueMessage>",
            quick_xml::escape::escape(text)
        );
        self.request(reqwest::Method::POST, "/messages", &[], &body)
            .await
            .map(|_| ())
    }

    /// How many messages the queue holds, the invisible ones (received, not yet deleted)
    /// included: Azure's approximate count (`x-ms-approximate-messages-count`).
    pub async fn approximate_messages(&self) -> Result<u64> {
        let (headers, _) = self
            .request_full(reqwest::Method::GET, "", &[("comp", "metadata")], "")
            .await?;
        headers
            .get("x-ms-approximate-messages-count")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| SlateError::Queue {
                url: self.spec.clone(),
                detail: "the queue's metadata has no x-ms-approximate-messages-count".into(),
            })
    }

    /// One signed request to `queue_url` + `sub` with `query` and `body`; the body of a 2xx
    /// answer.
    async fn request(
        &self,
        method: reqwest::Method,
        sub: &str,
        query: &[(&str, &str)],
        body: &str,
    ) -> Result<String> {
        self.request_full(method, sub, query, body)
            .await
            .map(|(_, body)| body)
    }

    /// Whether the queue exists (its metadata answers; 404: not).
    pub async fn exists(&self) -> Result<bool> {
        let (status, _, body) = self
            .send_signed(reqwest::Method::GET, "", &[("comp", "metadata")], "")
            .await?;
        match status.as_u16() {
            404 => Ok(false),
            _ if status.is_success() => Ok(true),
            _ => Err(self.answer_error(&reqwest::Method::GET, status, &body)),
        }
    }

    /// Creates the queue when it is missing: true when it was made, false when it was there
    /// (Create Queue answers 201 and 204).
    pub async fn ensure(&self) -> Result<bool> {
        let (status, _, body) = self.send_signed(reqwest::Method::PUT, "", &[], "").await?;
        match status.as_u16() {
            201 => Ok(true),
            _ if status.is_success() => Ok(false),
            _ => Err(self.answer_error(&reqwest::Method::PUT, status, &body)),
        }
    }

    /// [`Self::request`], with the answer's headers.
    async fn request_full(
        &self,
        method: reqwest::Method,
        sub: &str,
        query: &[(&str, &str)],
        body: &str,
    ) -> Result<(reqwest::header::HeaderMap, String)> {
        let (status, headers, text) = self.send_signed(method.clone(), sub, query, body).await?;
        if status.is_success() {
            return Ok((headers, text));
        }
        Err(self.answer_error(&method, status, &text))
    }

    /// One signed request: the answer's status, headers and body, whatever the status.
    async fn send_signed(
        &self,
        method: reqwest::Method,
        sub: &str,
        query: &[(&str, &str)],
        body: &str,
    ) -> Result<(reqwest::StatusCode, reqwest::header::HeaderMap, String)> {
        let date = chrono::Utc::now()
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let mut url = url::Url::parse(&format!("{}{sub}", self.queue_url)).map_err(|e| {
            SlateError::Store {
                url: self.spec.clone(),
                detail: e.to_string(),
            }
        })?;
        {
            let mut q = url.query_pairs_mut();
            for (k, v) in query {
                q.append_pair(k, v);
            }
        }
        let mut headers = reqwest::header::HeaderMap::new();
        let hv = |s: &str| {
            reqwest::header::HeaderValue::from_str(s).map_err(|e| SlateError::Store {
                url: self.spec.clone(),
                detail: e.to_string(),
            })
        };
        headers.insert("x-ms-date", hv(&date)?);
        headers.insert("x-ms-version", hv(API_VERSION)?);
        match &self.auth {
            Auth::SharedKey { account, key } => {
                let to_sign = string_to_sign(
                    method.as_str(),
                    body.len(),
                    &date,
                    account,
                    &format!("{}{sub}", self.path),
                    query,
                );
                let sig = base64_encode(hmac::sign(key, to_sign.as_bytes()).as_ref());
                headers.insert(
                    reqwest::header::AUTHORIZATION,
                    hv(&format!("SharedKey {account}:{sig}"))?,
                );
            }
            Auth::Sas(sas) => {
                let q = match url.query() {
                    Some(q) if !q.is_empty() => format!("{q}&{sas}"),
                    _ => sas.clone(),
                };
                url.set_query(Some(&q));
            }
            Auth::Entra(provider) => {
                let cred = provider
                    .get_credential()
                    .await
                    .map_err(|e| SlateError::Queue {
                        url: self.spec.clone(),
                        detail: format!("Entra ID token: {e}"),
                    })?;
                match cred.as_ref() {
                    object_store::azure::AzureCredential::BearerToken(t) => {
                        let mut v = hv(&format!("Bearer {t}"))?;
                        v.set_sensitive(true);
                        headers.insert(reqwest::header::AUTHORIZATION, v);
                    }
                    _ => {
                        return Err(SlateError::Queue {
                            url: self.spec.clone(),
                            detail: "the Azure credential chain gave no Entra ID token".into(),
                        })
                    }
                }
            }
        }
        let err = |detail: String| SlateError::Queue {
            url: self.spec.clone(),
            detail,
        };
        let resp = self
            .http
            .request(method.clone(), url)
            .headers(headers)
            .header(reqwest::header::CONTENT_LENGTH, body.len().to_string())
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| err(format!("{method} {}: {}", self.queue_url, e.without_url())))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp
            .text()
            .await
            .map_err(|e| err(format!("{method} {}: {}", self.queue_url, e.without_url())))?;
        Ok((status, headers, body))
    }

    /// The error of an answer that is no success, named by its code.
    fn answer_error(
        &self,
        method: &reqwest::Method,
        status: reqwest::StatusCode,
        body: &str,
    ) -> SlateError {
        let code = error_code(body);
        let what = match (status.as_u16(), code.as_deref()) {
            (404, _) => "the queue does not exist".to_string(),
            (403, c) => format!(
                "access denied ({}): check the account key or SAS token (Entra ID: the \
                 identity needs the Storage Queue Data Message Processor role)",
                c.unwrap_or("403")
            ),
            (s, c) => format!("HTTP {s}{}", c.map(|c| format!(" {c}")).unwrap_or_default()),
        };
        SlateError::Queue {
            url: self.spec.clone(),
            detail: format!("{method} {}: {what}", self.queue_url),
        }
    }

    /// Receives up to 32 messages (none when the queue is empty).
    pub async fn receive(&self) -> Result<Vec<QueueMessage>> {
        crate::stores::requests::count_receive();
        let n = BATCH.to_string();
        let vis = VISIBILITY_SECS.to_string();
        let body = self
            .request(
                reqwest::Method::GET,
                "/messages",
                &[("numofmessages", &n), ("visibilitytimeout", &vis)],
                "",
            )
            .await?;
        parse_messages(&body).map_err(|why| SlateError::Store {
            url: self.spec.clone(),
            detail: format!("GET {}/messages: {why}", self.queue_url),
        })
    }

    /// Deletes (acknowledges) one received message.
    pub async fn delete(&self, id: &str, pop_receipt: &str) -> Result<()> {
        self.request(
            reqwest::Method::DELETE,
            &format!("/messages/{id}"),
            &[("popreceipt", pop_receipt)],
            "",
        )
        .await
        .map(|_| ())
    }
}

/// How an Azure queue message is acknowledged: deleted by id with its pop receipt.
pub struct QueueAck {
    id: String,
    pop_receipt: String,
}

#[async_trait::async_trait]
impl Source for AzQueueSource {
    type Ack = QueueAck;

    fn name(&self) -> &'static str {
        "azqueue"
    }

    fn spec(&self) -> &str {
        &self.spec
    }

    /// One Get Messages (up to 32). Azure queues have no long poll: an empty answer is
    /// followed by a pause that doubles from `idle_min` up to `idle_max`.
    async fn next_batch(&mut self) -> Result<Vec<Message<QueueAck>>> {
        let msgs = self.receive().await?;
        if msgs.is_empty() {
            tokio::time::sleep(self.idle).await;
            self.idle = (self.idle * 2).min(self.idle_max);
            return Ok(Vec::new());
        }
        self.idle = self.idle_min;
        Ok(msgs
            .into_iter()
            .map(|m| {
                // the decoded event is kept beside the base64 text: a dead letter shows it
                let (decoded, parsed) = match super::decode_queue_message(&m.text) {
                    Ok(json) => {
                        let parsed = super::parse_eventgrid(&json).map_err(|e| e.to_string());
                        (Some(json.into_bytes()), parsed)
                    }
                    Err(e) => (None, Err(e.to_string())),
                };
                Message {
                    raw: m.text.into_bytes(),
                    decoded,
                    parsed,
                    ack: QueueAck {
                        id: m.id,
                        pop_receipt: m.pop_receipt,
                    },
                }
            })
            .collect())
    }

    /// Deletes the messages, 8 at a time; returns how many deletes failed (those messages
    /// come back after their visibility timeout).
    async fn ack(&mut self, acks: Vec<QueueAck>) -> usize {
        let this = &*self;
        let mut deletes = futures::stream::iter(acks)
            .map(|a| async move { this.delete(&a.id, &a.pop_receipt).await })
            .buffer_unordered(8);
        let mut failed = 0;
        while let Some(r) = deletes.next().await {
            if let Err(e) = r {
                // stored already: a redelivery only repeats a harmless, coalesced event
                tracing::warn!(error = %e, "queue delete failed");
                failed += 1;
            }
        }
        failed
    }
}

/// Shared Key's string to sign for the Queue service (version 2009-09-19 and later): the
/// standard headers (all empty here but Content-Length, which is empty when zero), the x-ms-
/// headers, then `/ACCOUNT/PATH` and each query parameter as `\nname:value` sorted by name.
fn string_to_sign(
    method: &str,
    content_length: usize,
    date: &str,
    account: &str,
    path: &str,
    query: &[(&str, &str)],
) -> String {
    let len = if content_length == 0 {
        String::new()
    } else {
        content_length.to_string()
    };
    let mut s = format!(
        "{method}\n\n\n{len}\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{API_VERSION}\n/{account}{path}"
    );
    let mut q: Vec<(String, &str)> = query
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), *v))
        .collect();
    q.sort();
    for (k, v) in q {
        s.push('\n');
        s.push_str(&k);
        s.push(':');
        s.push_str(v);
    }
    s
}

/// A Get Messages answer: `<QueueMessagesList>` of `<QueueMessage>`s.
#[derive(Debug, Default, serde::Deserialize)]
struct MessagesList {
    #[serde(rename = "QueueMessage", default)]
    messages: Vec<RawMessage>,
}

/// One `<QueueMessage>`; the elements slate does not use (`InsertionTime`, …) are skipped.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawMessage {
    message_id: Option<String>,
    pop_receipt: Option<String>,
    message_text: Option<String>,
    dequeue_count: Option<String>,
}

/// An error answer: `<Error><Code>…</Code><Message>…</Message></Error>`.
#[derive(Debug, serde::Deserialize)]
struct ErrorBody {
    #[serde(rename = "Code")]
    code: Option<String>,
}

/// The XML of an answer without the byte order mark Azure may put first.
fn xml_text(xml: &str) -> &str {
    xml.strip_prefix('\u{feff}').unwrap_or(xml)
}

/// The `<QueueMessage>` elements of a Get Messages answer (entities, CDATA and whitespace as
/// XML has them; a message without its id or pop receipt cannot be deleted and is skipped).
/// An answer that is not that XML is an error (the messages in it come back after their
/// visibility timeout).
pub fn parse_messages(xml: &str) -> std::result::Result<Vec<QueueMessage>, String> {
    let list: MessagesList = quick_xml::de::from_str(xml_text(xml))
        .map_err(|e| format!("not a Get Messages answer ({e})"))?;
    Ok(list
        .messages
        .into_iter()
        .filter_map(|m| {
            Some(QueueMessage {
                id: m.message_id.filter(|s| !s.is_empty())?,
                pop_receipt: m.pop_receipt.filter(|s| !s.is_empty())?,
                text: m.message_text.unwrap_or_default(),
                dequeue_count: m
                    .dequeue_count
                    .and_then(|c| c.trim().parse().ok())
                    .unwrap_or(0),
            })
        })
        .collect())
}

/// The `<Code>` of an error answer, if it is one.
fn error_code(xml: &str) -> Option<String> {
    quick_xml::de::from_str::<ErrorBody>(xml_text(xml))
        .ok()?
        .code
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_to_sign_follows_the_shared_key_rules() {
        let s = string_to_sign(
            "GET",
            0,
            "Mon, 30 Nov 2026 10:00:00 GMT",
            "devstoreaccount1",
            "/devstoreaccount1/events/messages",
            &[("visibilitytimeout", "60"), ("numofmessages", "32")],
        );
        assert_eq!(
            s,
            "GET\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:Mon, 30 Nov 2026 10:00:00 GMT\n\
             x-ms-version:2021-12-02\n/devstoreaccount1/devstoreaccount1/events/messages\n\
             numofmessages:32\nvisibilitytimeout:60"
        );
        let put = string_to_sign("POST", 42, "D", "a", "/a/q/messages", &[]);
        assert_eq!(
            put,
            "POST\n\n\n42\n\n\n\n\n\n\n\n\nx-ms-date:D\nx-ms-version:2021-12-02\n/a/a/q/messages"
        );
    }

    #[test]
    fn get_messages_answers_parse() {
        let xml = "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList>\
            <QueueMessage><MessageId>id-1</MessageId><InsertionTime>x</InsertionTime>\
            <PopReceipt>AgAAAA+/=</PopReceipt><DequeueCount>2</DequeueCount>\
            <MessageText>eyJhIjoxfQ==</MessageText></QueueMessage>\
            <QueueMessage><MessageId>id-2</MessageId><PopReceipt>p2</PopReceipt>\
            <MessageText>{&quot;k&quot;:&quot;a&amp;b &#x263A; &#65;&quot;}</MessageText></QueueMessage>\
            <QueueMessage><MessageId>no-receipt</MessageId></QueueMessage>\
            </QueueMessagesList>";
        let m = parse_messages(xml).unwrap();
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(
            m[0],
            QueueMessage {
                id: "id-1".into(),
                pop_receipt: "AgAAAA+/=".into(),
                text: "eyJhIjoxfQ==".into(),
                dequeue_count: 2,
            }
        );
        assert_eq!(m[1].text, "{\"k\":\"a&b \u{263A} A\"}");
        assert_eq!(parse_messages("<QueueMessagesList />"), Ok(vec![]));
        assert_eq!(
            parse_messages("<QueueMessagesList></QueueMessagesList>"),
            Ok(vec![])
        );
        // a cut or garbled answer is an error, not "no messages"
        for bad in [
            "<QueueMessage><MessageId>x",
            "<QueueMessagesList><QueueMessage><MessageId>a &bogus; b</MessageId>",
            "not xml",
            "",
        ] {
            assert!(parse_messages(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn get_messages_answers_parse_as_xml_has_them() {
        // whitespace and line breaks between elements, a BOM, the declaration, attributes,
        // elements in another order, CDATA, entities in every form
        let xml = "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?>\r\n\
            <QueueMessagesList xmlns:x=\"urn:x\">\n  \
              <QueueMessage a=\"1\" b='2'>\n    \
                <PopReceipt>p1</PopReceipt>\n    \
                <MessageText><![CDATA[{\"k\":\"<a&b>\"}]]></MessageText>\n    \
                <DequeueCount> 3 </DequeueCount>\n    \
                <MessageId>id-1</MessageId>\n  \
              </QueueMessage>\n  \
              <QueueMessage>\
                <MessageId>id-2</MessageId><PopReceipt>p&#x2B;2&#61;</PopReceipt>\
                <TimeNextVisible>Mon, 30 Nov 2026 10:00:00 GMT</TimeNextVisible>\
                <MessageText>&lt;&#233;&gt; &apos;&quot;&amp;</MessageText>\
              </QueueMessage>\n\
              <QueueMessage><MessageId>id-3</MessageId><PopReceipt>p3</PopReceipt>\
                <MessageText/></QueueMessage>\
            </QueueMessagesList>\n";
        let m = parse_messages(xml).unwrap();
        assert_eq!(
            m,
            vec![
                QueueMessage {
                    id: "id-1".into(),
                    pop_receipt: "p1".into(),
                    text: "{\"k\":\"<a&b>\"}".into(),
                    dequeue_count: 3,
                },
                QueueMessage {
                    id: "id-2".into(),
                    pop_receipt: "p+2=".into(),
                    text: "<\u{e9}> '\"&".into(),
                    dequeue_count: 0,
                },
                QueueMessage {
                    id: "id-3".into(),
                    pop_receipt: "p3".into(),
                    text: String::new(),
                    dequeue_count: 0,
                },
            ]
        );
        // what send() writes comes back as it was
        let text = "a<b>&\"c\" é";
        let sent = format!(
            "<QueueMessagesList><QueueMessage><MessageId>i</MessageId><PopReceipt>p</PopReceipt>\
             <MessageText>{}</MessageText></QueueMessage></QueueMessagesList>",
            quick_xml::escape::escape(text)
        );
        assert_eq!(parse_messages(&sent).unwrap()[0].text, text);
    }

    #[test]
    fn error_answers_name_their_code() {
        let cases: &[(&str, Option<&str>)] = &[
            (
                "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>QueueNotFound</Code>\
                 <Message>The specified queue does not exist.\nRequestId:x</Message></Error>",
                Some("QueueNotFound"),
            ),
            (
                "<Error>\n  <Message>denied</Message>\n  <Code> AuthenticationFailed </Code>\n\
                 <AuthenticationErrorDetail>a &amp; b</AuthenticationErrorDetail>\n</Error>",
                Some("AuthenticationFailed"),
            ),
            ("<Error><Code><![CDATA[ServerBusy]]></Code></Error>", Some("ServerBusy")),
            ("<Error><Message>no code</Message></Error>", None),
            ("<Error><Code></Code></Error>", None),
            ("", None),
            ("<html>bad gateway", None),
        ];
        for (xml, want) in cases {
            assert_eq!(error_code(xml).as_deref(), *want, "{xml}");
        }
    }
}
