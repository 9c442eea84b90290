//! `slate events setup az://CONTAINER/PREFIX --events azqueue://ACCOUNT/QUEUE` and `slate
//! events check …`: Azure Blob → Event Grid → Storage Queue. Setup makes, each step printed:
//!
//! 1. the queue, through the Queue service (signed as the daemon signs: Shared Key or SAS);
//! 2. through Azure Resource Manager, with an Entra ID token from the chain the blob client
//!    uses (service principal, workload identity, managed identity, `az login`: see
//!    `events::entra`; a SAS or an account key cannot call ARM): the storage account's Event Grid system topic (the one it has, else
//!    `slate-ACCOUNT`) and on it the event subscription `slate-QUEUE`, which delivers slate's
//!    event types of the pair's blobs to the queue.
//!
//! Without a subscription id, a resource group or the credential, setup does step 1 and
//! prints the `az` commands and an ARM template that do step 2. Check reads both back (Event
//! Grid only when ARM can be called). `SLATE_AZURE_ARM_ENDPOINT` and
//! `SLATE_AZURE_LOGIN_ENDPOINT` move ARM and the token endpoint (sovereign clouds, tests).
//! The rules and bodies are pure and table-tested in `events::wiring_azure`.

use std::time::Duration;

use serde_json::Value;

use crate::core::error::SlateError;
use crate::core::location::Location;
use crate::events::azqueue::AzQueueSource;
use crate::events::entra::{self, answer_error, scrub, Credential};
use crate::events::wiring::Finding;
use crate::events::wiring_azure::{self as rules, EventSub, Want, EVENTGRID_API, STORAGE_API};

const ARM: &str = "https://management.azure.com";
/// How long setup waits for Event Grid to finish making a resource.
const PROVISION_WAIT: Duration = Duration::from_secs(180);

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `ACCOUNT` and `QUEUE` of `azqueue://ACCOUNT/QUEUE` (the queue source checks the rest).
fn queue_parts(events: &str) -> Result<(String, String), SlateError> {
    events
        .strip_prefix("azqueue://")
        .and_then(|r| r.trim_end_matches('/').split_once('/'))
        .map(|(a, q)| (a.to_string(), q.to_string()))
        .ok_or_else(|| SlateError::BadOption {
            option: "--events".into(),
            why: format!(
                "'{events}': an Azure source's events come through Event Grid to a Storage \
                 Queue: azqueue://ACCOUNT/QUEUE"
            ),
        })
}

/// The account of the source's blobs, when its configuration names one.
fn blob_account(loc: &Location) -> Option<String> {
    let (b, _) = crate::stores::azure_builder(loc).ok()?;
    b.get_config_value(&object_store::azure::AzureConfigKey::AccountName)
        .filter(|a| !a.is_empty())
}

/// What a command's arguments name.
fn want_of(
    src: &str,
    events: &str,
    subscription: &Option<String>,
    resource_group: &Option<String>,
) -> Result<(Want, AzQueueSource, Option<Credential>), SlateError> {
    let loc = Location::parse(src)?;
    let vars = crate::stores::Vars::of(&loc);
    let cred = Credential::of(&|k| vars.get(k));
    let (queue_account, queue) = queue_parts(events)?;
    let q = AzQueueSource::open(events)?;
    let ok_name = |s: &str| {
        !s.is_empty()
            && s.len() <= 90
            && s.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '(' | ')'))
    };
    for (option, v) in [
        ("--subscription-id", subscription),
        ("--resource-group", resource_group),
    ] {
        if let Some(v) = v.as_deref().filter(|v| !ok_name(v)) {
            return Err(SlateError::BadOption {
                option: option.into(),
                why: format!("'{v}': letters, digits and '-_.()' only"),
            });
        }
    }
    let want = Want {
        subscription: subscription.clone(),
        resource_group: resource_group.clone(),
        account: blob_account(&loc).unwrap_or_else(|| queue_account.clone()),
        queue_account,
        queue,
        container: loc.bucket.clone(),
        prefix: loc.prefix.clone(),
    };
    Ok((want, q, cred))
}

/// Why slate cannot call ARM for `want`; None when it can try.
fn arm_missing(want: &Want, cred: &Option<Credential>) -> Option<String> {
    let mut why = Vec::new();
    if want.subscription.is_none() {
        why.push("no subscription id (--subscription-id or AZURE_SUBSCRIPTION_ID)");
    }
    if want.resource_group.is_none() {
        why.push("no resource group (--resource-group or AZURE_RESOURCE_GROUP)");
    }
    if cred.is_none() {
        why.push(entra::HINT);
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Azure Resource Manager with a bearer token. Neither the token nor the client secret is
/// ever shown.
struct Arm {
    http: reqwest::Client,
    base: String,
    token: String,
    /// What must never appear in a message: the secret and the token.
    secrets: Vec<String>,
}

impl Arm {
    /// A token for ARM by `cred`.
    async fn connect(cred: &Credential) -> Result<Arm, String> {
        let base = env("SLATE_AZURE_ARM_ENDPOINT")
            .unwrap_or_else(|| ARM.into())
            .trim_end_matches('/')
            .to_string();
        let login = env("SLATE_AZURE_LOGIN_ENDPOINT")
            .or_else(|| env("AZURE_AUTHORITY_HOST"))
            .unwrap_or_else(|| entra::LOGIN.into())
            .trim_end_matches('/')
            .to_string();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| e.without_url().to_string())?;
        let t = entra::token(&http, cred, &login, &base).await?;
        Ok(Arm {
            http,
            base,
            token: t.token,
            secrets: t.secrets,
        })
    }

    /// One call: `path` under the ARM endpoint (or a `nextLink` on it), with `api`.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        api: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), String> {
        let url = if path.starts_with(&self.base) {
            path.to_string()
        } else if path.starts_with('/') {
            format!("{}{path}", self.base)
        } else {
            // a link elsewhere would be sent the token: not followed
            return Err(format!(
                "ARM answered a link off {}: not followed",
                self.base
            ));
        };
        let url = if url.contains("api-version=") {
            url
        } else {
            format!(
                "{url}{}api-version={api}",
                if url.contains('?') { '&' } else { '?' }
            )
        };
        let mut auth = reqwest::header::HeaderValue::from_str(&format!("Bearer {}", self.token))
            .map_err(|_| "the Entra ID token is no header value".to_string())?;
        auth.set_sensitive(true);
        let mut req = self
            .http
            .request(method.clone(), &url)
            .header(reqwest::header::AUTHORIZATION, auth);
        if let Some(b) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b.to_string());
        }
        let shown = url.split('?').next().unwrap_or_default().to_string();
        let resp = req.send().await.map_err(|e| {
            format!(
                "{method} {shown}: {}",
                crate::stores::side::one_line(&e.without_url())
            )
        })?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// A 2xx answer's JSON, None for a 404, else an error naming the call.
    async fn get(&self, path: &str, api: &str) -> Result<Option<Value>, String> {
        match self.call(reqwest::Method::GET, path, api, None).await? {
            (200..=299, v) => Ok(Some(v)),
            (404, _) => Ok(None),
            (s, v) => Err(self.error("GET", path, s, &v)),
        }
    }

    fn error(&self, method: &str, path: &str, status: u16, v: &Value) -> String {
        let path = path.split('?').next().unwrap_or_default();
        let hint = match status {
            401 | 403 => {
                " (the identity needs EventGrid Contributor on the resource group and \
                 Reader on the storage account)"
            }
            _ => "",
        };
        scrub(
            &format!("{method} {path}: {}{hint}", answer_error(status, v)),
            &self.secrets,
        )
    }

    /// Every item of a list, its pages followed.
    async fn list(&self, path: &str, api: &str) -> Result<Vec<Value>, String> {
        let mut out = Vec::new();
        let mut next = Some(path.to_string());
        while let Some(p) = next.take() {
            let page = self.get(&p, api).await?.unwrap_or(Value::Null);
            if let Some(items) = page["value"].as_array() {
                out.extend(items.iter().cloned());
            }
            next = page["nextLink"].as_str().map(str::to_string);
        }
        Ok(out)
    }

    /// PUT, then wait until Event Grid says the resource is made.
    async fn put(&self, path: &str, body: &Value) -> Result<Value, String> {
        let (s, v) = self
            .call(reqwest::Method::PUT, path, EVENTGRID_API, Some(body))
            .await?;
        if !(200..=299).contains(&s) {
            return Err(self.error("PUT", path, s, &v));
        }
        let mut v = v;
        let mut pause = Duration::from_millis(250);
        let until = tokio::time::Instant::now() + PROVISION_WAIT;
        loop {
            match v["properties"]["provisioningState"].as_str() {
                None | Some("Succeeded") => return Ok(v),
                Some(state @ ("Failed" | "Canceled")) => {
                    return Err(format!(
                        "{}: provisioning state {state}",
                        path.split('?').next().unwrap_or_default()
                    ))
                }
                Some(state) if tokio::time::Instant::now() >= until => {
                    return Err(format!(
                        "{}: still {state} after {} s",
                        path.split('?').next().unwrap_or_default(),
                        PROVISION_WAIT.as_secs()
                    ))
                }
                Some(_) => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
            v = self.get(path, EVENTGRID_API).await?.unwrap_or(Value::Null);
        }
    }
}

fn eg_err(events: &str, detail: String) -> SlateError {
    SlateError::Queue {
        url: events.to_string(),
        detail: format!("Event Grid: {detail}"),
    }
}

/// The system topic of the account: its id and name, None when it has none.
async fn find_topic(arm: &Arm, want: &Want) -> Result<Option<(String, String)>, String> {
    let sub = want.subscription.as_deref().unwrap_or_default();
    let topics = arm
        .list(
            &format!("/subscriptions/{sub}/providers/Microsoft.EventGrid/systemTopics"),
            EVENTGRID_API,
        )
        .await?;
    Ok(rules::find_topic(&topics, &want.account))
}

/// Step 2 of setup: the system topic and the event subscription. Whether anything changed
/// (or, `dry_run`, would).
async fn wire_event_grid(arm: &Arm, want: &Want, dry_run: bool) -> Result<bool, String> {
    let (id, name, made) = ensure_topic(arm, want, dry_run).await?;
    Ok(ensure_subscription(arm, want, (id, name), dry_run).await? || made)
}

/// The account's system topic: its id (None when a dry run would make it) and name, and
/// whether it was (would be) made.
async fn ensure_topic(
    arm: &Arm,
    want: &Want,
    dry_run: bool,
) -> Result<(Option<String>, String, bool), String> {
    if let Some((id, name)) = find_topic(arm, want).await? {
        println!(
            "Event Grid system topic {name} of storage account {} is there",
            want.account
        );
        return Ok((Some(id), name, false));
    }
    let (Some(sub), Some(rg), Some(source)) = (
        want.subscription.as_deref(),
        want.resource_group.as_deref(),
        want.account_id(),
    ) else {
        return Err("no subscription id or resource group".into());
    };
    let name = want.topic_name();
    let id = format!(
        "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.EventGrid/systemTopics/\
         {name}"
    );
    // a system topic lives in its source's region
    let account = arm.get(&source, STORAGE_API).await?.ok_or_else(|| {
        format!(
            "there is no storage account {} in resource group {rg} of subscription {sub}",
            want.account
        )
    })?;
    let location = account["location"]
        .as_str()
        .ok_or_else(|| format!("storage account {} has no location", want.account))?;
    if !dry_run {
        arm.put(&id, &want.topic_body(location, &source)).await?;
    }
    println!(
        "{} Event Grid system topic {name} for storage account {} ({location})",
        if dry_run { "would create" } else { "created" },
        want.account
    );
    Ok(((!dry_run).then_some(id), name, true))
}

/// slate's event subscription on the topic (`topic`: its id, name): whether it was (would
/// be) made or changed.
async fn ensure_subscription(
    arm: &Arm,
    want: &Want,
    topic: (Option<String>, String),
    dry_run: bool,
) -> Result<bool, String> {
    let (topic_id, topic_name) = topic;
    let queue_account = want
        .queue_account_id()
        .ok_or("no subscription id or resource group")?;
    let name = want.subscription_name();
    let path = topic_id.map(|id| format!("{id}/eventSubscriptions/{name}"));
    let existing = match &path {
        Some(p) => arm.get(p, EVENTGRID_API).await?,
        None => None,
    };
    if let Some(e) = existing.as_ref().map(EventSub::parse) {
        if e.covers(want) {
            println!(
                "{} on system topic {topic_name} already delivers to queue {} of account {}: \
                 nothing to change",
                e.describe(),
                want.queue,
                want.queue_account
            );
            return Ok(false);
        }
    }
    let body = want.subscription_body(&queue_account, existing.as_ref());
    if let (Some(p), false) = (&path, dry_run) {
        arm.put(p, &body).await?;
    }
    let filter = &body["properties"]["filter"];
    let types: Vec<&str> = filter["includedEventTypes"]
        .as_array()
        .map(|t| t.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    println!(
        "{} event subscription {name} on system topic {topic_name}: {} under '{}' to queue {} \
         of account {}",
        match (existing.is_some(), dry_run) {
            (false, false) => "created",
            (false, true) => "would create",
            (true, false) => "updated",
            (true, true) => "would update",
        },
        types.join(", "),
        filter["subjectBeginsWith"].as_str().unwrap_or_default(),
        want.queue,
        want.queue_account
    );
    Ok(true)
}

/// What setup prints when it cannot call ARM: the `az` commands, the template, and why.
fn print_manual(want: &Want, why: &str) {
    let file = format!("slate-eventgrid-{}.json", want.account);
    println!("Event Grid: slate cannot call Azure Resource Manager here; these Azure CLI commands make the system topic and the event subscription (a storage account has one system topic: when it has one already, skip the first command and name that topic in the second):");
    println!();
    for c in rules::az_commands(want) {
        println!("  {c}");
    }
    println!();
    println!("or this ARM template, saved as {file}, deployed with:");
    println!();
    println!("  {}", rules::deploy_command(want, &file));
    println!();
    println!(
        "{}",
        serde_json::to_string_pretty(&rules::arm_template(want)).unwrap_or_default()
    );
    println!();
    println!("Event Grid not wired: {why}");
}

pub async fn setup(a: &super::events::SetupArgs) -> Result<i32, SlateError> {
    refuse_others(a.fanout.is_some(), a.cloud.topic.is_some())?;
    let (want, q, cred) = want_of(
        &a.src,
        &a.events,
        &a.cloud.subscription_id,
        &a.cloud.resource_group,
    )?;
    // 1. the queue
    let queue_line = format!("queue {} of account {}", want.queue, want.queue_account);
    let mut changed = false;
    if a.dry_run {
        if q.exists().await? {
            println!("{queue_line} is there");
        } else {
            changed = true;
            println!("would create {queue_line}");
        }
    } else if q.ensure().await? {
        changed = true;
        println!("created {queue_line}");
    } else {
        println!("{queue_line} is there");
    }
    // 2. Event Grid
    let cred = match (arm_missing(&want, &cred), cred) {
        (None, Some(c)) => c,
        (why, _) => {
            print_manual(&want, &why.unwrap_or_default());
            return Ok(0);
        }
    };
    let arm = Arm::connect(&cred)
        .await
        .map_err(|e| eg_err(&a.events, e))?;
    changed |= wire_event_grid(&arm, &want, a.dry_run)
        .await
        .map_err(|e| eg_err(&a.events, e))?;
    Ok(super::events::setup_done(a, changed))
}

/// The Event Grid findings, or why ARM could not be asked.
async fn check_event_grid(want: &Want, cred: &Option<Credential>) -> Result<Vec<Finding>, String> {
    let cred = match (arm_missing(want, cred), cred) {
        (None, Some(c)) => c,
        (why, _) => return Err(why.unwrap_or_default()),
    };
    let arm = Arm::connect(cred).await?;
    let Some((id, name)) = find_topic(&arm, want).await? else {
        return Ok(vec![Finding {
            broken: true,
            line: format!(
                "storage account {} has no Event Grid system topic: run `slate events setup`",
                want.account
            ),
        }]);
    };
    let subs = arm
        .list(&format!("{id}/eventSubscriptions"), EVENTGRID_API)
        .await?;
    let mut f = rules::check_subscriptions(&subs, want);
    for x in &mut f {
        x.line = format!("system topic {name}: {}", x.line);
    }
    Ok(f)
}

pub async fn check(a: &super::events::CheckArgs) -> Result<i32, SlateError> {
    refuse_others(a.fanout.is_some(), a.cloud.topic.is_some())?;
    let (want, q, cred) = want_of(
        &a.src,
        &a.events,
        &a.cloud.subscription_id,
        &a.cloud.resource_group,
    )?;
    let mut findings = Vec::new();
    if !q.exists().await? {
        findings.push(Finding {
            broken: true,
            line: format!(
                "there is no queue {} on account {}",
                want.queue, want.queue_account
            ),
        });
    }
    let checked = match check_event_grid(&want, &cred).await {
        Ok(f) => {
            findings.extend(f);
            true
        }
        Err(why) => {
            findings.push(Finding {
                broken: false,
                line: format!("Event Grid not checked: {why}"),
            });
            false
        }
    };
    Ok(super::events_gcs::report(
        &findings,
        &format!(
            "events of {} cannot reach queue {}: `slate events setup {} --events {}` repairs it",
            a.src, want.queue, a.src, a.events
        ),
        &if checked {
            format!(
                "ok: storage account {}'s system topic sends {} under {} to queue {} of account {}",
                want.account,
                rules::EG_EVENTS.join(", "),
                want.subject(),
                want.queue,
                want.queue_account
            )
        } else {
            format!(
                "ok: queue {} of account {} is there (Event Grid not checked)",
                want.queue, want.queue_account
            )
        },
    ))
}

fn refuse_others(fanout: bool, topic: bool) -> Result<(), SlateError> {
    if fanout {
        return Err(super::events_gcs::fanout_refused());
    }
    if topic {
        return Err(SlateError::BadOption {
            option: "--topic".into(),
            why: "names a GCS source's Pub/Sub topic; an Azure source's system topic is its \
                  storage account's"
                .into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_specs_name_account_and_queue() {
        assert_eq!(
            queue_parts("azqueue://acct/slate-q/").unwrap(),
            ("acct".into(), "slate-q".into())
        );
        for bad in ["sqs://q", "azqueue://acct", "webhook"] {
            assert!(queue_parts(bad).is_err(), "{bad}");
        }
    }
}
