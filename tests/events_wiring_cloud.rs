//! `slate events setup` and `slate events check` for GCS → Pub/Sub and Azure Blob → Event
//! Grid → Storage Queue. The Pub/Sub emulator and Azurite are real; what they do not have
//! (GCS's notificationConfigs and service agent on fake-gcs-server, Azure Resource Manager and
//! Entra ID anywhere) is a recorded-response double on 127.0.0.1 that answers as the
//! published APIs do and keeps every request, so the tests read what slate sent.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use common::*;
use serde_json::{json, Value};

/// One request a double received.
#[derive(Debug, Clone)]
struct Req {
    method: String,
    /// Path and query.
    target: String,
    /// Names lower-case.
    headers: BTreeMap<String, String>,
    body: String,
}

impl Req {
    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn line(&self) -> String {
        format!("{} {}", self.method, self.target)
    }
}

/// An HTTP/1.1 server on 127.0.0.1:0 answering each request with `handler` (status, JSON
/// text), one request per connection.
struct Double {
    url: String,
    log: Arc<Mutex<Vec<Req>>>,
}

impl Double {
    fn start<F>(handler: F) -> Double
    where
        F: Fn(&Req, &str) -> (u16, String) + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (handler, log2, base) = (Arc::new(handler), log.clone(), url.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (handler, log, base) = (handler.clone(), log2.clone(), base.clone());
                std::thread::spawn(move || {
                    let Some(req) = read_request(&mut conn) else {
                        return;
                    };
                    log.lock().expect("log").push(req.clone());
                    let (status, body) = handler(&req, &base);
                    let head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(head.as_bytes());
                    let _ = conn.write_all(body.as_bytes());
                });
            }
        });
        Double { url, log }
    }

    /// The requests since the last call.
    fn take(&self) -> Vec<Req> {
        std::mem::take(&mut *self.log.lock().expect("log"))
    }
}

fn read_request(conn: &mut std::net::TcpStream) -> Option<Req> {
    let mut r = BufReader::new(conn.try_clone().ok()?);
    let mut first = String::new();
    r.read_line(&mut first).ok()?;
    let mut parts = first.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Req {
        method,
        target,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn events(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    let mut c = slate();
    c.arg("events").args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    run(c)
}

fn said(out: &std::process::Output) -> String {
    format!("{}{}", stdout(out), stderr(out))
}

/// A Pub/Sub emulator resource (`projects/P/topics/T`), None for a 404.
fn pubsub_get(name: &str) -> Option<Value> {
    let r = reqwest::blocking::get(format!("{}/v1/{name}", pubsub_url())).expect("emulator");
    (r.status() == 200).then(|| r.json().expect("json"))
}

// ---------------------------------------------------------------------------------------
// GCS → Pub/Sub
// ---------------------------------------------------------------------------------------

/// The GCS JSON API's notificationConfigs and service agent, as "Pub/Sub notifications for
/// Cloud Storage" and the JSON API reference describe them, for bucket `bucket`.
fn gcs_double(bucket: &str, configs: Arc<Mutex<Vec<Value>>>) -> Double {
    let bucket = bucket.to_string();
    Double::start(move |r, base| {
        let configs_path = format!("/storage/v1/b/{bucket}/notificationConfigs");
        let mut c = configs.lock().expect("configs");
        match (r.method.as_str(), r.path()) {
            ("GET", p) if p == configs_path => {
                // GCS leaves `items` out when there is none
                let mut v = json!({"kind": "storage#notifications"});
                if !c.is_empty() {
                    v["items"] = json!(*c);
                }
                (200, v.to_string())
            }
            ("POST", p) if p == configs_path => {
                let mut v = r.json();
                if !v["topic"].is_string() {
                    return (400, json!({"error": {"code": 400, "message": "topic"}}).to_string());
                }
                let id = (c.len() + 10).to_string();
                let topic = v["topic"].as_str().unwrap_or_default().to_string();
                v["topic"] = json!(if topic.starts_with("//") {
                    topic
                } else {
                    format!("//pubsub.googleapis.com/{topic}")
                });
                v["id"] = json!(id);
                v["etag"] = json!(id);
                v["kind"] = json!("storage#notification");
                v["selfLink"] = json!(format!("{base}{configs_path}/{id}"));
                c.push(v.clone());
                (200, v.to_string())
            }
            ("GET", p) if p == format!("/storage/v1/b/{bucket}") => (
                200,
                json!({"kind": "storage#bucket", "name": bucket, "projectNumber": "424242"})
                    .to_string(),
            ),
            ("GET", "/storage/v1/projects/424242/serviceAccount") => (
                200,
                json!({"kind": "storage#serviceAccount",
                       "email_address": "service-424242@gs-project-accounts.iam.gserviceaccount.com"})
                .to_string(),
            ),
            _ => (
                404,
                json!({"error": {"code": 404, "message": "Not Found"}}).to_string(),
            ),
        }
    })
}

#[test]
fn gcs_setup_makes_topic_subscription_and_notification_once() {
    let bucket = format!("slate-gwire-{}", std::process::id());
    let project = format!("slate-wire-{}", std::process::id());
    let sub_id = unique("slate-gw");
    let topic = format!("projects/{project}/topics/{sub_id}");
    let subscription = format!("projects/{project}/subscriptions/{sub_id}");
    let ev = format!("pubsub://{subscription}");
    let src = format!("gs://{bucket}/data");
    // someone else's notification config is there already
    let configs = Arc::new(Mutex::new(vec![json!({
        "kind": "storage#notification", "id": "1", "etag": "1",
        "topic": format!("//pubsub.googleapis.com/projects/{project}/topics/theirs"),
        "payload_format": "NONE", "event_types": ["OBJECT_FINALIZE"],
    })]));
    let gcs = gcs_double(&bucket, configs.clone());
    let host = gcs.url.trim_start_matches("http://").to_string();
    let envs = [("STORAGE_EMULATOR_HOST", host.as_str())];

    // before: nothing, and check says so
    let out = events(&["check", &src, "--events", &ev], &envs);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        stdout(&out).contains(&format!("broken: there is no Pub/Sub topic {topic}")),
        "{}",
        said(&out)
    );
    gcs.take();

    // a dry run changes nothing
    let out = events(&["setup", &src, "--events", &ev, "--dry-run"], &envs);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let text = stdout(&out);
    for line in [
        format!("would create Pub/Sub topic {topic}"),
        "skipped the topic's IAM binding: the Pub/Sub emulator".to_string(),
        format!("would create Pub/Sub subscription {subscription} on topic {topic}"),
        format!("bucket {bucket}: would add notification config"),
        "dry run: nothing changed".to_string(),
    ] {
        assert!(text.contains(&line), "{line}: {text}");
    }
    assert!(
        gcs.take().iter().all(|r| r.method == "GET"),
        "a dry run only reads"
    );
    assert_eq!(pubsub_get(&topic), None, "a dry run made the topic");

    // the setup
    let out = events(&["setup", &src, "--events", &ev], &envs);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let text = stdout(&out);
    for line in [
        format!("created Pub/Sub topic {topic}"),
        format!("created Pub/Sub subscription {subscription} on topic {topic}"),
        format!("bucket {bucket}: added notification config '11': OBJECT_FINALIZE, OBJECT_DELETE, OBJECT_METADATA_UPDATE, OBJECT_ARCHIVE under 'data/' to topic {topic} (payload JSON_API_V1)"),
        format!("bucket {bucket}: kept 1 other notification config"),
        "wired: follow it with".to_string(),
    ] {
        assert!(text.contains(&line), "{line}: {text}");
    }
    // the emulator has the topic and the subscription on it
    assert!(pubsub_get(&topic).is_some(), "topic made");
    assert_eq!(
        pubsub_get(&subscription).expect("subscription made")["topic"],
        json!(topic)
    );
    // what slate asked GCS for: read the configs, add one
    let reqs = gcs.take();
    let lines: Vec<String> = reqs.iter().map(Req::line).collect();
    assert_eq!(
        lines,
        vec![
            format!("GET /storage/v1/b/{bucket}/notificationConfigs"),
            format!("POST /storage/v1/b/{bucket}/notificationConfigs"),
        ]
    );
    let body = reqs[1].json();
    assert_eq!(
        body["topic"],
        json!(format!("//pubsub.googleapis.com/{topic}"))
    );
    assert_eq!(body["payload_format"], "JSON_API_V1");
    assert_eq!(
        body["event_types"],
        json!([
            "OBJECT_FINALIZE",
            "OBJECT_DELETE",
            "OBJECT_METADATA_UPDATE",
            "OBJECT_ARCHIVE"
        ])
    );
    assert_eq!(body["object_name_prefix"], "data/");
    assert_eq!(
        reqs[1].headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert_eq!(configs.lock().expect("configs").len(), 2, "theirs kept");

    // twice: nothing changes, and it says so
    let out = events(&["setup", &src, "--events", &ev], &envs);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("Pub/Sub topic {topic} is there")),
        "{text}"
    );
    assert!(text.contains("is there"), "{text}");
    assert!(text.contains(": nothing to change"), "{text}");
    assert!(
        text.contains("nothing changed: every part was there"),
        "{text}"
    );
    assert!(
        !gcs.take().iter().any(|r| r.method != "GET"),
        "the second setup wrote"
    );
    assert_eq!(configs.lock().expect("configs").len(), 2);

    let out = events(&["check", &src, "--events", &ev], &envs);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let text = stdout(&out);
    assert!(
        text.contains("warning: IAM not checked: the Pub/Sub emulator"),
        "{text}"
    );
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.starts_with(&format!("ok: bucket {bucket} sends"))),
        "{text}"
    );

    // a pair of the whole bucket is not covered by the config on data/
    let out = events(
        &["check", &format!("gs://{bucket}"), "--events", &ev],
        &envs,
    );
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        stdout(&out).contains("filters on a prefix outside the pair's (the whole bucket)"),
        "{}",
        said(&out)
    );

    // someone removes slate's config: check names it, exit 1
    configs.lock().expect("configs").truncate(1);
    let out = events(&["check", &src, "--events", &ev], &envs);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "broken: the bucket has no notification config for topic {topic} (it has 1 other)"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "`slate events setup {src} --events {ev}` repairs it"
        )),
        "{text}"
    );

    // a --topic other than the subscription's: refused, both named, nothing changed
    let other = format!("projects/{project}/topics/{}", unique("slate-other"));
    let out = events(&["setup", &src, "--events", &ev, "--topic", &other], &envs);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(
        stderr(&out).contains(&format!(
            "subscription {subscription} is on topic {topic}, not {other}"
        )),
        "{}",
        said(&out)
    );
    assert!(
        !gcs.take().iter().any(|r| r.method == "POST"),
        "no config added for the refused topic"
    );
    assert!(
        stdout(&out).is_empty() && pubsub_get(&other).is_none(),
        "the refused topic was made: {}",
        said(&out)
    );

    // a source of another cloud's queue is refused in one line
    let out = events(&["setup", &src, "--events", "sqs://q"], &envs);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(
        stderr(&out).contains("pubsub://projects/PROJECT"),
        "{}",
        said(&out)
    );

    for name in [&subscription, &topic] {
        let _ = reqwest::blocking::Client::new()
            .delete(format!("{}/v1/{name}", pubsub_url()))
            .send();
    }
}

// ---------------------------------------------------------------------------------------
// Azure Blob → Event Grid → Storage Queue
// ---------------------------------------------------------------------------------------

const TENANT: &str = "tenant-7";
const CLIENT: &str = "client-9";
const SECRET: &str = "sekrit-Client-Value-31337";
const TOKEN: &str = "tok-ARM-8e4f1c2a";
const SUB: &str = "00000000-1111-2222-3333-444444444444";
const RG: &str = "rg-slate";
const ACCOUNT: &str = "devstoreaccount1";
const ASSERTION: &str = "eyJhbGciOiJSUzI1NiJ9.federated-kubelet-token.sig";
const IDENTITY_HEADER: &str = "idh-5d0c-secret-header";

fn account_id() -> String {
    format!("/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Storage/storageAccounts/{ACCOUNT}")
}

/// Entra ID's token endpoint and the ARM resources slate reads and makes: system topics (a
/// list of two pages, another account's topic on the first), the storage account, event
/// subscriptions. A PUT answers "Creating", a GET after it "Succeeded".
fn arm_double(resources: Arc<Mutex<BTreeMap<String, Value>>>) -> Double {
    Double::start(move |r, base| {
        let err = |s: u16, code: &str| {
            (
                s,
                json!({"error": {"code": code, "message": format!("{code} (double)")}}).to_string(),
            )
        };
        let token = || {
            (
                200,
                json!({"token_type": "Bearer", "expires_in": 3599, "access_token": TOKEN})
                    .to_string(),
            )
        };
        let query: BTreeMap<String, String> = url::form_urlencoded::parse(
            r.target
                .split_once('?')
                .map(|x| x.1)
                .unwrap_or("")
                .as_bytes(),
        )
        .into_owned()
        .collect();
        // managed identity: the instance metadata service, and App Service's endpoint
        if r.method == "GET" && r.path() == "/metadata/identity/oauth2/token" {
            if r.headers.get("metadata").map(String::as_str) != Some("true")
                || query.get("api-version").map(String::as_str) != Some("2018-02-01")
                || query.get("resource") != Some(&base.to_string())
            {
                return (
                    400,
                    json!({"error": "invalid_request", "error_description": "bad IMDS request"})
                        .to_string(),
                );
            }
            return token();
        }
        if r.method == "GET" && r.path() == "/msi/token" {
            if r.headers.get("x-identity-header").map(String::as_str) != Some(IDENTITY_HEADER)
                || query.get("api-version").map(String::as_str) != Some("2019-08-01")
                || query.get("resource") != Some(&base.to_string())
            {
                return (
                    401,
                    json!({"error": {"code": "Unauthorized", "message": "bad identity header"}})
                        .to_string(),
                );
            }
            return token();
        }
        if r.method == "POST" && r.path() == format!("/{TENANT}/oauth2/v2.0/token") {
            let form: BTreeMap<String, String> = url::form_urlencoded::parse(r.body.as_bytes())
                .into_owned()
                .collect();
            // workload identity: the federated token as the client's assertion
            if let Some(a) = form.get("client_assertion") {
                let ok = form.get("client_assertion_type").map(String::as_str)
                    == Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
                    && a == ASSERTION
                    && form.get("client_id").map(String::as_str) == Some(CLIENT)
                    && form.get("scope") == Some(&format!("{base}/.default"));
                if !ok {
                    return (401, json!({"error": "invalid_client", "error_description": "AADSTS700024: Client assertion is not within its valid time range."}).to_string());
                }
                return token();
            }
            let ok = form.get("grant_type").map(String::as_str) == Some("client_credentials")
                && form.get("client_id").map(String::as_str) == Some(CLIENT)
                && form.get("scope") == Some(&format!("{base}/.default"));
            if !ok {
                return (400, json!({"error": "invalid_request", "error_description": "AADSTS900144: bad form"}).to_string());
            }
            if form.get("client_secret").map(String::as_str) != Some(SECRET) {
                return (401, json!({"error": "invalid_client",
                    "error_description": "AADSTS7000215: Invalid client secret provided.\r\nTrace ID: 1"}).to_string());
            }
            return (
                200,
                json!({"token_type": "Bearer", "expires_in": 3599, "access_token": TOKEN})
                    .to_string(),
            );
        }
        if r.headers.get("authorization").map(String::as_str) != Some(&format!("Bearer {TOKEN}")) {
            return err(401, "AuthenticationFailed");
        }
        let mut res = resources.lock().expect("resources");
        let path = r.path().to_string();
        let topics = format!("/subscriptions/{SUB}/providers/Microsoft.EventGrid/systemTopics");
        match r.method.as_str() {
            "GET" if path == topics => {
                if r.target.contains("skiptoken=2") {
                    let mine: Vec<Value> = res
                        .iter()
                        .filter(|(k, _)| {
                            k.contains("/systemTopics/") && !k.contains("/eventSubscriptions/")
                        })
                        .map(|(_, v)| v.clone())
                        .collect();
                    (200, json!({"value": mine}).to_string())
                } else {
                    (200, json!({
                        "value": [{"id": "/subscriptions/x/resourceGroups/other/providers/Microsoft.EventGrid/systemTopics/theirs",
                                   "name": "theirs",
                                   "properties": {"source": "/subscriptions/x/resourceGroups/other/providers/Microsoft.Storage/storageAccounts/otheraccount",
                                                  "topicType": "Microsoft.Storage.StorageAccounts", "provisioningState": "Succeeded"}}],
                        "nextLink": format!("{base}{topics}?api-version=2022-06-15&$skiptoken=2"),
                    }).to_string())
                }
            }
            "GET" if path == account_id() => (
                200,
                json!({
                "id": account_id(), "name": ACCOUNT, "location": "westeurope", "kind": "StorageV2",
                "type": "Microsoft.Storage/storageAccounts"})
                .to_string(),
            ),
            "GET" if path.ends_with("/eventSubscriptions") => {
                let subs: Vec<Value> = res
                    .iter()
                    .filter(|(k, _)| k.starts_with(&format!("{}/", path)))
                    .map(|(_, v)| v.clone())
                    .collect();
                (200, json!({"value": subs}).to_string())
            }
            "GET" => match res.get(&path) {
                Some(v) => (200, v.to_string()),
                None => err(404, "ResourceNotFound"),
            },
            "PUT" => {
                let mut v = r.json();
                let name = path.rsplit('/').next().unwrap_or_default().to_string();
                v["id"] = json!(path);
                v["name"] = json!(name);
                v["properties"]["provisioningState"] = json!("Succeeded");
                if path.contains("/eventSubscriptions/") {
                    v["properties"]["topic"] = json!(path.split("/eventSubscriptions/").next());
                }
                res.insert(path.clone(), v.clone());
                v["properties"]["provisioningState"] = json!("Creating");
                (201, v.to_string())
            }
            _ => err(405, "MethodNotAllowed"),
        }
    })
}

fn arm_env(double: &Double) -> Vec<(&'static str, String)> {
    vec![
        ("AZURE_TENANT_ID", TENANT.to_string()),
        ("AZURE_CLIENT_ID", CLIENT.to_string()),
        ("AZURE_CLIENT_SECRET", SECRET.to_string()),
        ("SLATE_AZURE_ARM_ENDPOINT", double.url.clone()),
        ("SLATE_AZURE_LOGIN_ENDPOINT", double.url.clone()),
        // one of the two from the environment, the other a flag
        ("AZURE_SUBSCRIPTION_ID", SUB.to_string()),
    ]
}

fn az_events(args: &[&str], envs: &[(&'static str, String)]) -> std::process::Output {
    let e: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = events(args, &e);
    let all = said(&out);
    // the client secret, the token, and the account key the queue calls are signed with
    // (Azurite's well-known one)
    for secret in [SECRET, TOKEN, "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50u"] {
        assert!(!all.contains(secret), "a secret in the output: {all}");
    }
    out
}

/// Whether Azurite has the queue.
fn queue_exists(queue: &str) -> bool {
    // SAFETY of env: the test's own process reads these to reach Azurite's queue; every test
    // sets the same values.
    unsafe {
        std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
        std::env::set_var("AZURITE_QUEUE_STORAGE_URL", azurite_queue_url());
    }
    let q = slate::events::azqueue::AzQueueSource::open(&format!("azqueue://{ACCOUNT}/{queue}"))
        .expect("queue");
    rt().block_on(q.exists()).expect("queue metadata")
}

#[test]
fn azure_setup_through_resource_manager_makes_topic_and_subscription_once() {
    let queue = unique("slate-aw").to_ascii_lowercase();
    let ev = format!("azqueue://{ACCOUNT}/{queue}");
    let src = "az://content/data".to_string();
    let resources = Arc::new(Mutex::new(BTreeMap::new()));
    let arm = arm_double(resources.clone());
    let envs = arm_env(&arm);
    let setup = |extra: &[&str]| {
        let mut args = vec![
            "setup",
            src.as_str(),
            "--events",
            ev.as_str(),
            "--resource-group",
            RG,
        ];
        args.extend_from_slice(extra);
        az_events(&args, &envs)
    };
    let topic_path = format!(
        "/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.EventGrid/systemTopics/slate-{ACCOUNT}"
    );
    let sub_name = format!("slate-{queue}");
    let sub_path = format!("{topic_path}/eventSubscriptions/{sub_name}");

    // a dry run reads, makes nothing
    let out = setup(&["--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let text = stdout(&out);
    for line in [
        format!("would create queue {queue} of account {ACCOUNT}"),
        format!("would create Event Grid system topic slate-{ACCOUNT} for storage account {ACCOUNT} (westeurope)"),
        format!("would create event subscription {sub_name} on system topic slate-{ACCOUNT}"),
        "dry run: nothing changed".to_string(),
    ] {
        assert!(text.contains(&line), "{line}: {text}");
    }
    assert!(!queue_exists(&queue), "a dry run made the queue");
    assert!(
        arm.take().iter().all(|r| r.method != "PUT"),
        "a dry run wrote"
    );

    let out = setup(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let text = stdout(&out);
    for line in [
        format!("created queue {queue} of account {ACCOUNT}"),
        format!("created Event Grid system topic slate-{ACCOUNT} for storage account {ACCOUNT} (westeurope)"),
        format!("created event subscription {sub_name} on system topic slate-{ACCOUNT}: Microsoft.Storage.BlobCreated, Microsoft.Storage.BlobDeleted, Microsoft.Storage.BlobRenamed, Microsoft.Storage.DirectoryDeleted, Microsoft.Storage.DirectoryRenamed under '/blobServices/default/containers/content/blobs/data/' to queue {queue} of account {ACCOUNT}"),
        "wired: follow it with".to_string(),
    ] {
        assert!(text.contains(&line), "{line}: {text}");
    }
    assert!(queue_exists(&queue), "Azurite has the queue");

    let reqs = arm.take();
    let lines: Vec<String> = reqs.iter().map(Req::line).collect();
    let token = &reqs[0];
    assert_eq!(token.line(), format!("POST /{TENANT}/oauth2/v2.0/token"));
    let form: BTreeMap<String, String> = url::form_urlencoded::parse(token.body.as_bytes())
        .into_owned()
        .collect();
    assert_eq!(form["grant_type"], "client_credentials");
    assert_eq!(form["scope"], format!("{}/.default", arm.url));
    let topics = format!("/subscriptions/{SUB}/providers/Microsoft.EventGrid/systemTopics");
    assert_eq!(
        lines[1..],
        [
            format!("GET {topics}?api-version=2022-06-15"),
            format!("GET {topics}?api-version=2022-06-15&$skiptoken=2"),
            format!("GET {}?api-version=2023-05-01", account_id()),
            format!("PUT {topic_path}?api-version=2022-06-15"),
            format!("GET {topic_path}?api-version=2022-06-15"),
            format!("GET {sub_path}?api-version=2022-06-15"),
            format!("PUT {sub_path}?api-version=2022-06-15"),
            format!("GET {sub_path}?api-version=2022-06-15"),
        ],
        "{lines:#?}"
    );
    for r in &reqs[1..] {
        assert_eq!(
            r.headers.get("authorization").map(String::as_str),
            Some(format!("Bearer {TOKEN}").as_str()),
            "{}",
            r.line()
        );
    }
    let topic_body = reqs[4].json();
    assert_eq!(
        topic_body,
        json!({"location": "westeurope",
               "properties": {"source": account_id(), "topicType": "Microsoft.Storage.StorageAccounts"}})
    );
    let sub_body = reqs[7].json();
    assert_eq!(
        sub_body["properties"]["destination"],
        json!({"endpointType": "StorageQueue",
               "properties": {"resourceId": account_id(), "queueName": queue}})
    );
    assert_eq!(
        sub_body["properties"]["filter"],
        json!({"includedEventTypes": [
                   "Microsoft.Storage.BlobCreated", "Microsoft.Storage.BlobDeleted",
                   "Microsoft.Storage.BlobRenamed", "Microsoft.Storage.DirectoryDeleted",
                   "Microsoft.Storage.DirectoryRenamed"],
               "subjectBeginsWith": "/blobServices/default/containers/content/blobs/data/"})
    );
    assert_eq!(
        sub_body["properties"]["eventDeliverySchema"],
        "EventGridSchema"
    );

    // twice: nothing is written, and it says so
    let out = setup(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("queue {queue} of account {ACCOUNT} is there")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Event Grid system topic slate-{ACCOUNT} of storage account {ACCOUNT} is there"
        )),
        "{text}"
    );
    assert!(text.contains(": nothing to change"), "{text}");
    assert!(
        text.contains("nothing changed: every part was there"),
        "{text}"
    );
    assert!(
        arm.take().iter().all(|r| r.method != "PUT"),
        "the second setup wrote"
    );

    let check = || {
        az_events(
            &["check", &src, "--events", &ev, "--resource-group", RG],
            &envs,
        )
    };
    let out = check();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        stdout(&out).starts_with("ok: storage account"),
        "{}",
        said(&out)
    );

    // someone narrows the subscription to creations: check says deletes never arrive
    resources
        .lock()
        .expect("resources")
        .get_mut(&sub_path)
        .expect("sub")["properties"]["filter"]["includedEventTypes"] =
        json!(["Microsoft.Storage.BlobCreated"]);
    let out = check();
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "broken: system topic slate-{ACCOUNT}: no event subscription to queue {queue} sends \
             Microsoft.Storage.BlobDeleted: those changes never reach the daemon"
        )),
        "{text}"
    );
    // setup repairs it in place
    let out = setup(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        stdout(&out).contains(&format!("updated event subscription {sub_name}")),
        "{}",
        said(&out)
    );
    assert_eq!(check().status.code(), Some(0));

    // a pair of another container is outside the subscription's subject
    let out = az_events(
        &[
            "check",
            "az://other/data",
            "--events",
            &ev,
            "--resource-group",
            RG,
        ],
        &envs,
    );
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        stdout(&out).contains("filters on a subject outside the pair's"),
        "{}",
        said(&out)
    );
    arm.take();

    // a wrong secret: setup stops with one line, check only warns; neither shows the secret
    let mut wrong = envs.clone();
    wrong.retain(|(k, _)| *k != "AZURE_CLIENT_SECRET");
    wrong.push(("AZURE_CLIENT_SECRET", "not-the-secret-0000".into()));
    let out = az_events(
        &["setup", &src, "--events", &ev, "--resource-group", RG],
        &wrong,
    );
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(
        stderr(&out).contains("AADSTS7000215") && !said(&out).contains("not-the-secret-0000"),
        "{}",
        said(&out)
    );
    let out = az_events(
        &["check", &src, "--events", &ev, "--resource-group", RG],
        &wrong,
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        stdout(&out).contains("warning: Event Grid not checked: Entra ID token"),
        "{}",
        said(&out)
    );
    assert!(!said(&out).contains("not-the-secret-0000"));
}

/// Every other Entra ID credential of the chain the blob client uses, each one the only one
/// named: workload identity, managed identity (the metadata service, App Service's endpoint),
/// `az login` (a stand-in `az` on PATH, as the real one answers). Each gets ARM's token, and
/// `events check` reads the wiring setup made with a client secret.
#[test]
fn azure_resource_manager_takes_workload_managed_identity_and_az_login() {
    let queue = unique("slate-ae").to_ascii_lowercase();
    let ev = format!("azqueue://{ACCOUNT}/{queue}");
    let src = "az://content/data";
    let arm = arm_double(Arc::new(Mutex::new(BTreeMap::new())));
    let mut envs = arm_env(&arm);
    let out = az_events(
        &["setup", src, "--events", &ev, "--resource-group", RG],
        &envs,
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    arm.take();
    envs.retain(|(k, _)| {
        !k.starts_with("AZURE_TENANT_ID") && *k != "AZURE_CLIENT_ID" && *k != "AZURE_CLIENT_SECRET"
    });

    let dir = tempfile::tempdir().expect("tmp");
    let token_file = dir.path().join("azure-identity-token");
    std::fs::write(&token_file, format!("{ASSERTION}\n")).expect("token file");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let az = bin.join("az");
    let az_args = dir.path().join("az-args");
    std::fs::write(
        &az,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\nif [ -n \"$AZ_FAIL\" ]; then echo \"ERROR: Please run 'az login' to setup account.\" >&2; exit 1; fi\nprintf '{{\"accessToken\": \"{TOKEN}\", \"expiresOn\": \"2099-01-01 00:00:00.000000\", \"subscription\": \"{SUB}\", \"tenant\": \"{TENANT}\", \"tokenType\": \"Bearer\"}}\\n'\n",
            az_args.display()
        ),
    )
    .expect("az");
    std::fs::set_permissions(&az, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let check = |extra: &[(&'static str, String)]| {
        let mut e = envs.clone();
        e.extend_from_slice(extra);
        az_events(&["check", src, "--events", &ev, "--resource-group", RG], &e)
    };
    type Env = Vec<(&'static str, String)>;
    let cases: Vec<(&str, Env, String)> = vec![
        (
            "workload identity",
            vec![
                ("AZURE_TENANT_ID", TENANT.into()),
                ("AZURE_CLIENT_ID", CLIENT.into()),
                (
                    "AZURE_FEDERATED_TOKEN_FILE",
                    token_file.display().to_string(),
                ),
            ],
            format!("POST /{TENANT}/oauth2/v2.0/token"),
        ),
        (
            "metadata service",
            vec![
                ("SLATE_USE_INSTANCE_METADATA", "true".into()),
                (
                    "AZURE_MSI_ENDPOINT",
                    format!("{}/metadata/identity/oauth2/token", arm.url),
                ),
            ],
            format!(
                "GET /metadata/identity/oauth2/token?api-version=2018-02-01&resource={}",
                url::form_urlencoded::byte_serialize(arm.url.as_bytes()).collect::<String>()
            ),
        ),
        (
            "App Service",
            vec![
                ("SLATE_USE_INSTANCE_METADATA", "true".into()),
                ("IDENTITY_ENDPOINT", format!("{}/msi/token", arm.url)),
                ("IDENTITY_HEADER", IDENTITY_HEADER.into()),
            ],
            format!(
                "GET /msi/token?api-version=2019-08-01&resource={}",
                url::form_urlencoded::byte_serialize(arm.url.as_bytes()).collect::<String>()
            ),
        ),
    ];
    for (what, extra, first) in cases {
        let out = check(&extra);
        assert_eq!(out.status.code(), Some(0), "{what}: {}", said(&out));
        assert!(
            stdout(&out).starts_with("ok: storage account"),
            "{what}: {}",
            said(&out)
        );
        assert!(!said(&out).contains(ASSERTION) && !said(&out).contains(IDENTITY_HEADER));
        let reqs = arm.take();
        assert_eq!(reqs[0].line(), first, "{what}");
        assert!(reqs.len() > 1, "{what}: ARM was read");
        for r in &reqs[1..] {
            assert_eq!(
                r.headers.get("authorization").map(String::as_str),
                Some(format!("Bearer {TOKEN}").as_str()),
                "{what}: {}",
                r.line()
            );
        }
    }

    // `az login`: no request for the token, `az` asked for ARM's
    let login = vec![
        ("AZURE_USE_AZURE_CLI", "true".to_string()),
        ("PATH", path.clone()),
    ];
    let out = check(&login);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        stdout(&out).starts_with("ok: storage account"),
        "{}",
        said(&out)
    );
    let args = std::fs::read_to_string(&az_args).expect("az ran");
    assert_eq!(
        args.lines().collect::<Vec<_>>(),
        [
            "account",
            "get-access-token",
            "--output",
            "json",
            "--resource",
            &format!("{}/", arm.url)
        ]
    );
    assert!(arm.take().iter().all(|r| !r.path().contains("token")));

    // not logged in: check says why Event Grid went unchecked, setup stops
    let mut failing = login.clone();
    failing.push(("AZ_FAIL", "1".into()));
    let out = check(&failing);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        stdout(&out).contains("warning: Event Grid not checked: `az account get-access-token`")
            && stdout(&out).contains("Please run 'az login'"),
        "{}",
        said(&out)
    );
    // a federated token file that is not there is named
    let out = check(&[
        ("AZURE_TENANT_ID", TENANT.into()),
        ("AZURE_CLIENT_ID", CLIENT.into()),
        (
            "AZURE_FEDERATED_TOKEN_FILE",
            "/nonexistent/azure-token".into(),
        ),
    ]);
    assert!(
        stdout(&out).contains("AZURE_FEDERATED_TOKEN_FILE /nonexistent/azure-token"),
        "{}",
        said(&out)
    );
    // none at all: setup prints the commands and names every way to give one
    let out = az_events(
        &["setup", src, "--events", &ev, "--resource-group", RG],
        &envs,
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        stdout(&out).contains("AZURE_FEDERATED_TOKEN_FILE; SLATE_USE_INSTANCE_METADATA=true for a managed identity; AZURE_USE_AZURE_CLI=true for `az login`"),
        "{}",
        said(&out)
    );
}

/// The ARM template setup prints: the lines from `{` to `}`, parsed.
fn template(text: &str) -> Value {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| *l == "{")
        .expect("template start");
    let end = lines.iter().rposition(|l| *l == "}").expect("template end");
    serde_json::from_str(&lines[start..=end].join("\n")).expect("template JSON")
}

#[test]
fn azure_setup_without_credentials_makes_the_queue_and_prints_commands_and_a_template() {
    let queue = unique("slate-am").to_ascii_lowercase();
    let ev = format!("azqueue://{ACCOUNT}/{queue}");
    let src = "az://content/data";
    // a subscription and group known, no Entra ID credential
    let out = az_events(
        &[
            "setup",
            src,
            "--events",
            &ev,
            "--subscription-id",
            SUB,
            "--resource-group",
            RG,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("created queue {queue} of account {ACCOUNT}")),
        "{text}"
    );
    assert!(queue_exists(&queue));
    let cmds: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("az eventgrid"))
        .collect();
    assert_eq!(cmds.len(), 2, "{text}");
    let subject = "/blobServices/default/containers/content/blobs/data/";
    for want in [
        "az eventgrid system-topic create --subscription ".to_string() + SUB,
        format!("--resource-group {RG} --name slate-{ACCOUNT}"),
        "--topic-type Microsoft.Storage.StorageAccounts".into(),
        format!("--source {}", account_id()),
    ] {
        assert!(cmds[0].contains(&want), "{want}: {}", cmds[0]);
    }
    for want in [
        format!("az eventgrid system-topic event-subscription create --subscription {SUB} --resource-group {RG}"),
        format!("--system-topic-name slate-{ACCOUNT} --name slate-{queue}"),
        "--endpoint-type storagequeue".into(),
        format!("--endpoint {}/queueservices/default/queues/{queue}", account_id()),
        "--included-event-types Microsoft.Storage.BlobCreated Microsoft.Storage.BlobDeleted Microsoft.Storage.BlobRenamed Microsoft.Storage.DirectoryDeleted Microsoft.Storage.DirectoryRenamed".into(),
        format!("--subject-begins-with {subject}"),
        "--event-delivery-schema eventgridschema".into(),
    ] {
        assert!(cmds[1].contains(&want), "{want}: {}", cmds[1]);
    }
    assert!(
        text.contains(&format!("az deployment group create --subscription {SUB} --resource-group {RG} --template-file slate-eventgrid-{ACCOUNT}.json")),
        "{text}"
    );
    let t = template(&text);
    let r = t["resources"].as_array().expect("resources");
    assert_eq!(r.len(), 2, "{t}");
    assert_eq!(r[0]["type"], "Microsoft.EventGrid/systemTopics");
    assert_eq!(r[0]["apiVersion"], "2022-06-15");
    assert_eq!(r[0]["name"], format!("slate-{ACCOUNT}"));
    assert_eq!(r[0]["properties"]["source"], account_id());
    assert_eq!(
        r[0]["properties"]["topicType"],
        "Microsoft.Storage.StorageAccounts"
    );
    assert_eq!(
        r[1]["type"],
        "Microsoft.EventGrid/systemTopics/eventSubscriptions"
    );
    assert_eq!(r[1]["apiVersion"], "2022-06-15");
    assert_eq!(r[1]["name"], format!("slate-{ACCOUNT}/slate-{queue}"));
    let p = &r[1]["properties"];
    assert_eq!(p["destination"]["endpointType"], "StorageQueue");
    assert_eq!(p["destination"]["properties"]["resourceId"], account_id());
    assert_eq!(p["destination"]["properties"]["queueName"], json!(queue));
    assert_eq!(p["filter"]["subjectBeginsWith"], subject);
    assert_eq!(
        p["filter"]["includedEventTypes"].as_array().map(Vec::len),
        Some(5)
    );
    assert_eq!(p["eventDeliverySchema"], "EventGridSchema");
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("Event Grid not wired: no Entra ID credential (AZURE_TENANT_ID"),
        "{last}"
    );

    // nothing known: az looks the account's id, group and region up itself
    let out = az_events(&["setup", src, "--events", &ev], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("queue {queue} of account {ACCOUNT} is there")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "--source \"$(az storage account show --name {ACCOUNT} --query id --output tsv)\""
        )),
        "{text}"
    );
    assert_eq!(
        template(&text)["resources"][0]["properties"]["source"],
        format!("[resourceId('Microsoft.Storage/storageAccounts', '{ACCOUNT}')]")
    );
    assert!(
        text.lines().last().unwrap_or_default().starts_with(
            "Event Grid not wired: no subscription id (--subscription-id or AZURE_SUBSCRIPTION_ID); no resource group"
        ),
        "{text}"
    );

    // check: the queue is there, Event Grid not checked
    let out = az_events(&["check", src, "--events", &ev], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("warning: Event Grid not checked: no subscription id"),
        "{text}"
    );
    assert!(
        text.contains(&format!("ok: queue {queue} of account {ACCOUNT} is there")),
        "{text}"
    );
    // a queue that is not there is a break
    let missing = format!(
        "azqueue://{ACCOUNT}/{}",
        unique("slate-none").to_ascii_lowercase()
    );
    let out = az_events(&["check", src, "--events", &missing], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        stdout(&out).contains("broken: there is no queue"),
        "{}",
        said(&out)
    );
    // another transport for an Azure source: refused, one line
    let out = az_events(&["setup", src, "--events", "sqs://q"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(
        stderr(&out).contains("azqueue://ACCOUNT/QUEUE"),
        "{}",
        said(&out)
    );
}
