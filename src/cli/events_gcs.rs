//! `slate events setup gs://BUCKET/PREFIX --events pubsub://projects/P/subscriptions/S` and
//! `slate events check …`: GCS → Pub/Sub. Setup makes, each step printed as done (or, with
//! `--dry-run`, as it would be done) and each one idempotent:
//!
//! 1. the topic (`--topic projects/Q/topics/T`, else `projects/P/topics/S`);
//! 2. a binding on the topic's IAM policy that lets the bucket's GCS service agent publish
//!    (skipped against the emulator, which has no IAM);
//! 3. the subscription, on that topic;
//! 4. a notification configuration of the bucket that sends slate's event types of the
//!    pair's keys to the topic, unless one already does (the others are left alone).
//!
//! Check reads each back. The rules are pure and table-tested in `events::wiring_gcs`; the
//! steps run against [`JsonApi`], Pub/Sub's REST API and the GCS JSON API (signed as
//! `stores::gcsmeta` signs, with the bucket's credentials).

use serde_json::{json, Value};

use crate::core::error::SlateError;
use crate::core::location::Location;
use crate::events::pubsub::{resource_path, Endpoint};
use crate::events::wiring::Finding;
use crate::events::wiring_gcs::{self as rules, Names, GCS_EVENTS, PUBLISHER};
use crate::stores::gcsmeta::GcsPatch;

/// One JSON REST call: the status and the JSON answer (`{}` when there is none), or a
/// one-line error of the transport (never with a token).
#[async_trait::async_trait]
pub(crate) trait JsonApi: Send + Sync {
    async fn call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String>;
}

/// Pub/Sub's REST API: `path` is `/v1/…`.
struct PubSubRest {
    http: reqwest::Client,
    endpoint: Endpoint,
}

#[async_trait::async_trait]
impl JsonApi for PubSubRest {
    async fn call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        let url = format!("{}{path}", self.endpoint.url.trim_end_matches('/'));
        let m = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
        let mut req = self
            .http
            .request(m, &url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.map(|b| b.to_string()).unwrap_or_default());
        if let Some(h) = self.endpoint.auth_headers().await? {
            req = req.headers(h);
        }
        let resp = req.send().await.map_err(|e| {
            format!(
                "{method} {url}: {}",
                crate::stores::side::one_line(&e.without_url())
            )
        })?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or_else(|_| json!({})),
        ))
    }
}

/// The GCS JSON API: `path` is under `/storage/v1`.
struct GcsRest(GcsPatch);

#[async_trait::async_trait]
impl JsonApi for GcsRest {
    async fn call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        self.0.storage_call(method, path, body).await
    }
}

/// The lines a command prints, kept as well (for tests).
pub(crate) struct Out {
    pub lines: Vec<String>,
    echo: bool,
}

impl Out {
    pub(crate) fn new(echo: bool) -> Out {
        Out {
            lines: Vec::new(),
            echo,
        }
    }

    fn say(&mut self, line: String) {
        if self.echo {
            println!("{line}");
        }
        self.lines.push(line);
    }
}

/// One pair's GCS wiring and the APIs it is made through.
pub(crate) struct Wiring<'a> {
    pub pubsub: &'a dyn JsonApi,
    pub storage: &'a dyn JsonApi,
    /// Pub/Sub is the emulator: no IAM.
    pub emulator: bool,
    pub names: Names,
    /// `pubsub://…` as given, for errors.
    pub events: String,
    pub bucket: String,
    pub prefix: String,
}

/// Characters of a bucket name that go into a path as they are.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.');

/// The `error.message` (and status) of a Google API error answer, for a message.
fn api_error(status: u16, v: &Value) -> String {
    let code = v["error"]["status"].as_str().unwrap_or_default();
    let message =
        crate::core::error::first_line(v["error"]["message"].as_str().unwrap_or_default());
    match status {
        401 | 403 => format!("access denied ({status} {code}): {message}"),
        s => format!("HTTP {s} {code} {message}").trim_end().to_string(),
    }
}

impl Wiring<'_> {
    fn queue_err(&self, detail: String) -> SlateError {
        SlateError::Queue {
            url: self.events.clone(),
            detail,
        }
    }

    fn store_err(&self, detail: String) -> SlateError {
        SlateError::Store {
            url: format!("gs://{}", self.bucket),
            detail,
        }
    }

    async fn ps(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), SlateError> {
        self.pubsub
            .call(method, path, body)
            .await
            .map_err(|e| self.queue_err(e))
    }

    async fn gcs(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), SlateError> {
        self.storage
            .call(method, path, body)
            .await
            .map_err(|e| self.store_err(e))
    }

    fn topic_path(&self) -> String {
        resource_path(&self.names.topic)
    }

    fn configs_path(&self) -> String {
        format!(
            "/b/{}/notificationConfigs",
            percent_encoding::utf8_percent_encode(&self.bucket, SEGMENT)
        )
    }

    /// Whether a Pub/Sub resource exists (GET: 200, 404), with its JSON.
    async fn get(&self, path: &str, what: &str) -> Result<Option<Value>, SlateError> {
        match self.ps("GET", path, None).await? {
            (200, v) => Ok(Some(v)),
            (404, _) => Ok(None),
            (s, v) => Err(self.queue_err(format!("reading {what}: {}", api_error(s, &v)))),
        }
    }

    /// An error naming both topics when subscription `v` is on another than the one asked for.
    fn same_topic(&self, v: &Value) -> Result<(), SlateError> {
        let (topic, sub) = (&self.names.topic, &self.names.subscription);
        let on = Self::topic_of(v);
        if on == *topic {
            return Ok(());
        }
        Err(self.queue_err(format!(
            "subscription {sub} is on topic {on}, not {topic}: give --topic {on}, or another \
             subscription; nothing changed"
        )))
    }

    /// The topic a subscription is on (`_deleted-topic_` when its topic was deleted).
    fn topic_of(v: &Value) -> String {
        v["topic"].as_str().unwrap_or_default().to_string()
    }

    /// The email of the GCS service agent of the bucket's project (of the subscription's
    /// project when the bucket does not say which it is in).
    async fn service_agent(&self) -> Result<String, SlateError> {
        let bucket = format!(
            "/b/{}?fields=projectNumber",
            percent_encoding::utf8_percent_encode(&self.bucket, SEGMENT)
        );
        let project = match self.gcs("GET", &bucket, None).await? {
            (200, v) => match &v["projectNumber"] {
                Value::String(s) if !s.is_empty() => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => self.names.project.clone(),
            },
            (s, v) => {
                return Err(self.store_err(format!("reading the bucket: {}", api_error(s, &v))))
            }
        };
        let path = format!(
            "/projects/{}/serviceAccount",
            percent_encoding::utf8_percent_encode(&project, SEGMENT)
        );
        match self.gcs("GET", &path, None).await? {
            (200, v) => v["email_address"]
                .as_str()
                .filter(|e| !e.is_empty())
                .map(str::to_string)
                .ok_or_else(|| {
                    self.store_err(format!(
                        "project {project}'s GCS service agent: the answer names no email_address"
                    ))
                }),
            (s, v) => Err(self.store_err(format!(
                "project {project}'s GCS service agent: {}",
                api_error(s, &v)
            ))),
        }
    }

    /// The topic's IAM policy (version 3, so that conditional bindings are read whole).
    async fn policy(&self) -> Result<Value, SlateError> {
        let path = format!("{}:getIamPolicy", self.topic_path());
        let body = json!({"options": {"requestedPolicyVersion": 3}});
        match self.ps("POST", &path, Some(body)).await? {
            (200, v) => Ok(v),
            (s, v) => Err(self.queue_err(format!(
                "reading topic {}'s IAM policy: {}",
                self.names.topic,
                api_error(s, &v)
            ))),
        }
    }

    /// The bucket's notification configurations.
    async fn configs(&self) -> Result<Vec<rules::Config>, SlateError> {
        match self.gcs("GET", &self.configs_path(), None).await? {
            (200, v) => rules::parse_configs(&v).map_err(|e| self.store_err(e)),
            (404, _) => Err(self.store_err("no such bucket".into())),
            (s, v) => Err(self.store_err(format!(
                "reading its notification configs: {}{}",
                api_error(s, &v),
                if s == 403 {
                    " (needs storage.buckets.get)"
                } else {
                    ""
                }
            ))),
        }
    }

    /// Makes what is missing; whether anything changed (or, `dry_run`, would).
    pub(crate) async fn setup(&self, dry_run: bool, out: &mut Out) -> Result<bool, SlateError> {
        // read first: a subscription on another topic, or a bucket that is not there (or may
        // not be read), stops setup before it has made anything
        let sub_now = self
            .get(&resource_path(&self.names.subscription), "the subscription")
            .await?;
        if let Some(v) = &sub_now {
            self.same_topic(v)?;
        }
        let configs = self.configs().await?;
        let topic_made = self.make_topic(dry_run, out).await?;
        let granted = self.grant_publisher(dry_run, !topic_made, out).await?;
        let sub_made = self.make_subscription(sub_now, dry_run, out).await?;
        let config_added = self.add_config(&configs, dry_run, out).await?;
        Ok(topic_made || granted || sub_made || config_added)
    }

    /// Step 1, the topic: whether it was (would be) made.
    async fn make_topic(&self, dry_run: bool, out: &mut Out) -> Result<bool, SlateError> {
        let topic = &self.names.topic;
        let there = if dry_run {
            self.get(&self.topic_path(), "the topic").await?.is_some()
        } else {
            match self.ps("PUT", &self.topic_path(), Some(json!({}))).await? {
                (200, _) => false,
                (409, _) => true,
                (s, v) => {
                    return Err(
                        self.queue_err(format!("creating topic {topic}: {}", api_error(s, &v)))
                    )
                }
            }
        };
        out.say(match (there, dry_run) {
            (true, _) => format!("Pub/Sub topic {topic} is there"),
            (false, false) => format!("created Pub/Sub topic {topic}"),
            (false, true) => format!("would create Pub/Sub topic {topic}"),
        });
        Ok(!there)
    }

    /// Step 2, the GCS service agent may publish to the topic (`topic_there`: it existed
    /// before, so that it has a policy to read in a dry run): whether it was (would be)
    /// granted.
    async fn grant_publisher(
        &self,
        dry_run: bool,
        topic_there: bool,
        out: &mut Out,
    ) -> Result<bool, SlateError> {
        let topic = &self.names.topic;
        if self.emulator {
            out.say(
                "skipped the topic's IAM binding: the Pub/Sub emulator (PUBSUB_EMULATOR_HOST) \
                 has no IAM"
                    .into(),
            );
            return Ok(false);
        }
        let member = rules::agent_member(&self.service_agent().await?);
        let next = if dry_run && !topic_there {
            Some(Value::Null)
        } else {
            rules::merge_publisher(&self.policy().await?, &member).map_err(|e| self.queue_err(e))?
        };
        let Some(policy) = next else {
            out.say(format!(
                "topic {topic} already lets the bucket's GCS service agent ({member}) publish"
            ));
            return Ok(false);
        };
        if !dry_run {
            let path = format!("{}:setIamPolicy", self.topic_path());
            match self
                .ps("POST", &path, Some(json!({ "policy": policy })))
                .await?
            {
                (200, _) => {}
                (s, v) => {
                    return Err(self.queue_err(format!(
                        "setting topic {topic}'s IAM policy: {}{}",
                        api_error(s, &v),
                        if s == 409 || s == 412 {
                            " (changed meanwhile: run setup again)"
                        } else {
                            ""
                        }
                    )))
                }
            }
        }
        out.say(format!(
            "{} {PUBLISHER} on topic {topic} to {member} (the bucket's GCS service agent)",
            if dry_run { "would grant" } else { "granted" }
        ));
        Ok(true)
    }

    /// Step 3, the subscription on the topic (`sub_now`: as read before): whether it was
    /// (would be) made.
    async fn make_subscription(
        &self,
        sub_now: Option<Value>,
        dry_run: bool,
        out: &mut Out,
    ) -> Result<bool, SlateError> {
        let (topic, sub) = (&self.names.topic, &self.names.subscription);
        let sub_path = resource_path(sub);
        let existing = if dry_run || sub_now.is_some() {
            sub_now
        } else {
            match self
                .ps("PUT", &sub_path, Some(json!({ "topic": topic })))
                .await?
            {
                (200, _) => None,
                (409, _) => Some(self.get(&sub_path, "the subscription").await?.ok_or_else(
                    || {
                        self.queue_err(format!(
                            "subscription {sub} exists and then does not: run setup again"
                        ))
                    },
                )?),
                (s, v) => {
                    return Err(self
                        .queue_err(format!("creating subscription {sub}: {}", api_error(s, &v))))
                }
            }
        };
        if let Some(v) = existing {
            // made meanwhile by someone else: on the topic asked for?
            self.same_topic(&v)?;
            out.say(format!(
                "Pub/Sub subscription {sub} on topic {topic} is there"
            ));
            return Ok(false);
        }
        out.say(format!(
            "{} Pub/Sub subscription {sub} on topic {topic}",
            if dry_run { "would create" } else { "created" }
        ));
        Ok(true)
    }

    /// Step 4, the bucket's notification configuration (`configs`: as read before): whether
    /// one was (would be) added.
    async fn add_config(
        &self,
        configs: &[rules::Config],
        dry_run: bool,
        out: &mut Out,
    ) -> Result<bool, SlateError> {
        let topic = &self.names.topic;
        let body = rules::config_body(topic, &self.prefix);
        let under = body["object_name_prefix"]
            .as_str()
            .map(|p| format!(" under '{p}'"))
            .unwrap_or_default();
        if let Some(c) = rules::covering(configs, topic, &self.prefix) {
            out.say(format!(
                "bucket {} already sends its events{under} to topic {topic} ({}): nothing to \
                 change",
                self.bucket,
                c.describe()
            ));
            return Ok(false);
        }
        let id = if dry_run {
            String::new()
        } else {
            match self.gcs("POST", &self.configs_path(), Some(body)).await? {
                (200 | 201, v) => match &v["id"] {
                    Value::String(s) => format!(" '{s}'"),
                    Value::Number(n) => format!(" '{n}'"),
                    _ => String::new(),
                },
                (s, v) => {
                    return Err(self.store_err(format!(
                        "adding a notification config: {}{}",
                        api_error(s, &v),
                        if s == 403 {
                            " (needs storage.buckets.update, and the GCS service agent \
                             pubsub.topics.publish on the topic)"
                        } else {
                            ""
                        }
                    )))
                }
            }
        };
        let verb = |done: &'static str, planned: &'static str| if dry_run { planned } else { done };
        out.say(format!(
            "bucket {}: {} notification config{id}: {}{under} to topic {topic} (payload {})",
            self.bucket,
            verb("added", "would add"),
            GCS_EVENTS.join(", "),
            rules::PAYLOAD
        ));
        if !configs.is_empty() {
            out.say(format!(
                "bucket {}: {} {} other notification config{}",
                self.bucket,
                verb("kept", "would keep"),
                configs.len(),
                if configs.len() == 1 { "" } else { "s" }
            ));
        }
        Ok(true)
    }

    /// What is missing or wrong, each a finding.
    pub(crate) async fn check(&self) -> Result<Vec<Finding>, SlateError> {
        let (topic, sub) = (&self.names.topic, &self.names.subscription);
        let broken = |line: String| Finding { broken: true, line };
        let warn = |line: String| Finding {
            broken: false,
            line,
        };
        let mut out = Vec::new();
        let topic_there = self.get(&self.topic_path(), "the topic").await?.is_some();
        if !topic_there {
            out.push(broken(format!("there is no Pub/Sub topic {topic}")));
        }
        match self.get(&resource_path(sub), "the subscription").await? {
            None => out.push(broken(format!("there is no Pub/Sub subscription {sub}"))),
            Some(v) if Self::topic_of(&v) != *topic => out.push(broken(format!(
                "subscription {sub} is on topic {}, not {topic}",
                Self::topic_of(&v)
            ))),
            Some(_) => {}
        }
        out.extend(rules::check_configs(
            &self.configs().await?,
            topic,
            &self.prefix,
        ));
        if self.emulator {
            out.push(warn(
                "IAM not checked: the Pub/Sub emulator (PUBSUB_EMULATOR_HOST) has none".into(),
            ));
        } else if topic_there {
            let member = rules::agent_member(&self.service_agent().await?);
            if !rules::lets_publish(&self.policy().await?, &member) {
                // a grant on the project lets it publish too, which the topic's policy does
                // not show: a warning, not a break
                out.push(warn(format!(
                    "topic {topic}'s IAM policy does not let the bucket's GCS service agent \
                     ({member}) publish ({PUBLISHER}); unless the project grants it, GCS drops \
                     the events"
                )));
            }
        }
        Ok(out)
    }
}

/// What a command's arguments name, with the APIs from the environment.
struct Apis {
    pubsub: PubSubRest,
    storage: GcsRest,
    emulator: bool,
    names: Names,
    loc: Location,
    events: String,
}

impl Apis {
    fn of(src: &str, events: &str, topic: Option<&str>) -> Result<Apis, SlateError> {
        let loc = Location::parse(src)?;
        if !events.starts_with("pubsub://") {
            return Err(SlateError::BadOption {
                option: "--events".into(),
                why: format!(
                    "'{events}': a GCS source's events come through Pub/Sub: \
                     pubsub://projects/PROJECT/subscriptions/SUBSCRIPTION"
                ),
            });
        }
        let names = rules::names(events, topic).map_err(|why| SlateError::BadOption {
            option: if why.starts_with("--topic") {
                "--topic".into()
            } else {
                "--events".into()
            },
            why,
        })?;
        let storage = GcsRest(GcsPatch::for_location(&loc)?);
        let queue_err = |detail: String| SlateError::Queue {
            url: events.to_string(),
            detail,
        };
        let endpoint = Endpoint::from_env().map_err(queue_err)?;
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .map_err(|e| queue_err(e.without_url().to_string()))?;
        Ok(Apis {
            emulator: endpoint.emulator,
            pubsub: PubSubRest { http, endpoint },
            storage,
            names,
            loc,
            events: events.to_string(),
        })
    }

    fn wiring(&self) -> Wiring<'_> {
        Wiring {
            pubsub: &self.pubsub,
            storage: &self.storage,
            emulator: self.emulator,
            names: self.names.clone(),
            events: self.events.clone(),
            bucket: self.loc.bucket.clone(),
            prefix: self.loc.prefix.clone(),
        }
    }
}

pub async fn setup(a: &super::events::SetupArgs) -> Result<i32, SlateError> {
    if a.fanout.is_some() {
        return Err(fanout_refused());
    }
    let apis = Apis::of(&a.src, &a.events, a.cloud.topic.as_deref())?;
    let changed = apis.wiring().setup(a.dry_run, &mut Out::new(true)).await?;
    Ok(super::events::setup_done(a, changed))
}

pub async fn check(a: &super::events::CheckArgs) -> Result<i32, SlateError> {
    if a.fanout.is_some() {
        return Err(fanout_refused());
    }
    let apis = Apis::of(&a.src, &a.events, a.cloud.topic.as_deref())?;
    let w = apis.wiring();
    let findings = w.check().await?;
    Ok(report(
        &findings,
        &format!(
            "events of {} cannot reach subscription {}: `slate events setup {} --events {}{}` \
             repairs it",
            a.src,
            w.names.subscription,
            a.src,
            a.events,
            a.cloud
                .topic
                .as_deref()
                .map(|t| format!(" --topic {t}"))
                .unwrap_or_default()
        ),
        &format!(
            "ok: bucket {} sends {} to topic {}, to which subscription {} is attached",
            w.bucket,
            GCS_EVENTS.join(", "),
            w.names.topic,
            w.names.subscription
        ),
    ))
}

/// Prints `check`'s findings (`broken: …`, `warning: …`), then `when_broken` (exit 1) or
/// `when_ok` (exit 0).
pub(crate) fn report(findings: &[Finding], when_broken: &str, when_ok: &str) -> i32 {
    for f in findings {
        println!(
            "{}: {}",
            if f.broken { "broken" } else { "warning" },
            f.line
        );
    }
    if findings.iter().any(|f| f.broken) {
        println!("{when_broken}");
        1
    } else {
        println!("{when_ok}");
        0
    }
}

pub(crate) fn fanout_refused() -> SlateError {
    SlateError::BadOption {
        option: "--fanout".into(),
        why: "an SNS fan-out is S3's; a GCS topic takes any number of subscriptions and Event \
              Grid any number of event subscriptions"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Pub/Sub and the GCS JSON API in memory, as their references describe them; every
    /// request recorded.
    #[derive(Default)]
    struct Fake {
        topics: Mutex<Vec<String>>,
        subs: Mutex<HashMap<String, String>>,
        policies: Mutex<HashMap<String, Value>>,
        configs: Mutex<Vec<Value>>,
        log: Mutex<Vec<(String, String, Option<Value>)>>,
    }

    #[async_trait::async_trait]
    impl JsonApi for Fake {
        async fn call(
            &self,
            method: &'static str,
            path: &str,
            body: Option<Value>,
        ) -> Result<(u16, Value), String> {
            self.log
                .lock()
                .unwrap()
                .push((method.into(), path.into(), body.clone()));
            let name = path.trim_start_matches("/v1/");
            let not_found = (404, json!({"error": {"status": "NOT_FOUND"}}));
            let exists = (409, json!({"error": {"status": "ALREADY_EXISTS"}}));
            Ok(match (method, path) {
                ("GET", "/b/bkt?fields=projectNumber") => (200, json!({"projectNumber": "42"})),
                ("GET", "/projects/42/serviceAccount") => (
                    200,
                    json!({"email_address": "service-42@gs-project-accounts.iam.gserviceaccount.com"}),
                ),
                ("GET", "/b/bkt/notificationConfigs") => {
                    let c = self.configs.lock().unwrap().clone();
                    (200, json!({"kind": "storage#notifications", "items": c}))
                }
                ("POST", "/b/bkt/notificationConfigs") => {
                    let mut c = self.configs.lock().unwrap();
                    let mut v = body.unwrap_or_default();
                    v["id"] = json!((c.len() + 1).to_string());
                    c.push(v.clone());
                    (200, v)
                }
                ("POST", p) if p.ends_with(":getIamPolicy") => {
                    let t = name.trim_end_matches(":getIamPolicy").to_string();
                    let p = self.policies.lock().unwrap().get(&t).cloned();
                    (200, p.unwrap_or_else(|| json!({"etag": "ACAB"})))
                }
                ("POST", p) if p.ends_with(":setIamPolicy") => {
                    let t = name.trim_end_matches(":setIamPolicy").to_string();
                    let mut p = body.unwrap_or_default()["policy"].clone();
                    p["etag"] = json!("BwX2");
                    self.policies.lock().unwrap().insert(t, p.clone());
                    (200, p)
                }
                ("PUT", _) if name.contains("/topics/") => {
                    let mut t = self.topics.lock().unwrap();
                    if t.iter().any(|x| x == name) {
                        exists
                    } else {
                        t.push(name.into());
                        (200, json!({"name": name}))
                    }
                }
                ("GET", _) if name.contains("/topics/") => {
                    if self.topics.lock().unwrap().iter().any(|x| x == name) {
                        (200, json!({"name": name}))
                    } else {
                        not_found
                    }
                }
                ("PUT", _) if name.contains("/subscriptions/") => {
                    let mut s = self.subs.lock().unwrap();
                    if s.contains_key(name) {
                        exists
                    } else {
                        let topic = body.unwrap_or_default()["topic"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string();
                        s.insert(name.into(), topic.clone());
                        (200, json!({"name": name, "topic": topic}))
                    }
                }
                ("GET", _) if name.contains("/subscriptions/") => {
                    match self.subs.lock().unwrap().get(name) {
                        Some(t) => (200, json!({"name": name, "topic": t})),
                        None => not_found,
                    }
                }
                _ => (
                    400,
                    json!({"error": {"message": format!("{method} {path}")}}),
                ),
            })
        }
    }

    impl Fake {
        fn calls(&self) -> Vec<String> {
            self.log
                .lock()
                .unwrap()
                .drain(..)
                .map(|(m, p, _)| format!("{m} {p}"))
                .collect()
        }
    }

    fn wiring<'a>(fake: &'a Fake, emulator: bool, topic: Option<&str>) -> Wiring<'a> {
        let events = "pubsub://projects/p1/subscriptions/slate-ev";
        Wiring {
            pubsub: fake,
            storage: fake,
            emulator,
            names: rules::names(events, topic).unwrap(),
            events: events.into(),
            bucket: "bkt".into(),
            prefix: "data".into(),
        }
    }

    #[tokio::test]
    async fn setup_makes_each_part_once_and_grants_the_service_agent() {
        let fake = Fake::default();
        // someone else's binding and notification config are there already
        fake.policies.lock().unwrap().insert(
            "projects/p1/topics/slate-ev".into(),
            json!({"etag": "ACAB", "version": 1, "bindings": [
                {"role": "roles/pubsub.viewer", "members": ["user:a@example.com"]}]}),
        );
        fake.configs.lock().unwrap().push(json!({"id": "9",
            "topic": "//pubsub.googleapis.com/projects/p1/topics/other",
            "payload_format": "NONE"}));
        let w = wiring(&fake, false, None);

        // a dry run reads and changes nothing
        let mut out = Out::new(false);
        assert!(w.setup(true, &mut out).await.unwrap());
        assert!(
            fake.calls().iter().all(|c| c.starts_with("GET ")),
            "a dry run only reads"
        );
        assert_eq!(
            out.lines,
            vec![
                "would create Pub/Sub topic projects/p1/topics/slate-ev",
                "would grant roles/pubsub.publisher on topic projects/p1/topics/slate-ev to \
                 serviceAccount:service-42@gs-project-accounts.iam.gserviceaccount.com (the \
                 bucket's GCS service agent)",
                "would create Pub/Sub subscription projects/p1/subscriptions/slate-ev on topic \
                 projects/p1/topics/slate-ev",
                "bucket bkt: would add notification config: OBJECT_FINALIZE, OBJECT_DELETE, \
                 OBJECT_METADATA_UPDATE, OBJECT_ARCHIVE under 'data/' to topic \
                 projects/p1/topics/slate-ev (payload JSON_API_V1)",
                "bucket bkt: would keep 1 other notification config",
            ]
        );

        let mut out = Out::new(false);
        assert!(w.setup(false, &mut out).await.unwrap());
        assert_eq!(
            fake.calls(),
            vec![
                "GET /v1/projects/p1/subscriptions/slate-ev",
                "GET /b/bkt/notificationConfigs",
                "PUT /v1/projects/p1/topics/slate-ev",
                "GET /b/bkt?fields=projectNumber",
                "GET /projects/42/serviceAccount",
                "POST /v1/projects/p1/topics/slate-ev:getIamPolicy",
                "POST /v1/projects/p1/topics/slate-ev:setIamPolicy",
                "PUT /v1/projects/p1/subscriptions/slate-ev",
                "POST /b/bkt/notificationConfigs",
            ]
        );
        // the policy written kept the other binding and the etag it was read with
        let policy = fake.policies.lock().unwrap()["projects/p1/topics/slate-ev"].clone();
        assert_eq!(policy["bindings"].as_array().unwrap().len(), 2);
        assert!(out.lines[1].starts_with("granted roles/pubsub.publisher"));
        assert!(
            out.lines[3].starts_with("bucket bkt: added notification config '2': "),
            "{:?}",
            out.lines
        );
        let configs = fake.configs.lock().unwrap().clone();
        assert_eq!(configs[1]["object_name_prefix"], "data/");
        assert_eq!(configs[1]["payload_format"], "JSON_API_V1");
        assert_eq!(w.check().await.unwrap(), vec![]);
        fake.calls();

        // the second run changes nothing, and says so
        let mut out = Out::new(false);
        assert!(!w.setup(false, &mut out).await.unwrap(), "{:?}", out.lines);
        let calls = fake.calls();
        assert!(
            !calls
                .iter()
                .any(|c| c.ends_with(":setIamPolicy") || c.starts_with("POST /b/")),
            "{calls:?}"
        );
        assert!(out.lines[1].contains("already lets the bucket's GCS service agent"));
        assert!(
            out.lines[3].ends_with(": nothing to change"),
            "{:?}",
            out.lines
        );

        // check: the binding taken away is a warning, the config taken away is a break
        fake.policies
            .lock()
            .unwrap()
            .insert("projects/p1/topics/slate-ev".into(), json!({"etag": "x"}));
        let f = w.check().await.unwrap();
        assert!(
            f.len() == 1 && !f[0].broken && f[0].line.contains("does not let"),
            "{f:?}"
        );
        fake.configs.lock().unwrap().truncate(1);
        let f = w.check().await.unwrap();
        assert!(
            f.iter().any(|f| f.broken
                && f.line
                    .contains("no notification config for topic projects/p1/topics/slate-ev")),
            "{f:?}"
        );
    }

    #[tokio::test]
    async fn a_subscription_on_another_topic_is_named() {
        let fake = Fake::default();
        fake.subs.lock().unwrap().insert(
            "projects/p1/subscriptions/slate-ev".into(),
            "projects/p1/topics/older".into(),
        );
        let w = wiring(&fake, true, None);
        let e = w.setup(false, &mut Out::new(false)).await.unwrap_err();
        assert!(
            fake.calls().iter().all(|c| c.starts_with("GET ")),
            "nothing made before the subscription was found on another topic"
        );
        let e = e.to_string();
        assert!(
            e.contains("subscription projects/p1/subscriptions/slate-ev is on topic projects/p1/topics/older, not projects/p1/topics/slate-ev"),
            "{e}"
        );
        let f = w.check().await.unwrap();
        // against the emulator no IAM call is made
        assert!(!fake.calls().iter().any(|c| c.contains("IamPolicy")));
        assert!(
            f.iter()
                .any(|f| f.broken && f.line.contains("is on topic projects/p1/topics/older")),
            "{f:?}"
        );
        assert!(f
            .iter()
            .any(|f| !f.broken && f.line.starts_with("IAM not checked")));
    }
}
