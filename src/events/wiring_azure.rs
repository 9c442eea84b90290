//! The wiring an Azure Blob source needs to deliver its events to a Storage Queue, as pure
//! functions: an Event Grid system topic on the storage account and an event subscription on
//! it with the queue as destination, filtered to the pair's container and prefix. Here: the
//! ARM resource ids and request bodies, whether an event subscription read back covers a
//! pair (and one that does not, widened to), and, for when slate cannot call Azure Resource
//! Manager itself, the `az` commands and an ARM template that make the same two resources.
//! `slate events setup` / `check` for `az://` (`cli/events_azure.rs`) do the calls.

use serde_json::{json, Value};

use super::wiring::{filter_prefix, Finding};

/// The event types slate follows: what `events::eventgrid` turns into upserts, deletes and
/// folder reconciles (the last three come from accounts with a hierarchical namespace only;
/// Event Grid takes them on any account).
pub const EG_EVENTS: [&str; 5] = [
    "Microsoft.Storage.BlobCreated",
    "Microsoft.Storage.BlobDeleted",
    "Microsoft.Storage.BlobRenamed",
    "Microsoft.Storage.DirectoryDeleted",
    "Microsoft.Storage.DirectoryRenamed",
];

/// Without these no write or delete reaches the daemon.
const EG_REQUIRED: [&str; 2] = [
    "Microsoft.Storage.BlobCreated",
    "Microsoft.Storage.BlobDeleted",
];

/// The api-version of the Event Grid resources (system topics, their event subscriptions).
pub const EVENTGRID_API: &str = "2022-06-15";
/// The api-version slate reads a storage account with (its region).
pub const STORAGE_API: &str = "2023-05-01";
/// A system topic's type for a storage account.
pub const TOPIC_TYPE: &str = "Microsoft.Storage.StorageAccounts";
/// The schema slate asks for (it reads CloudEvents 1.0 too).
pub const SCHEMA: &str = "EventGridSchema";

const SUBJECT_ROOT: &str = "/blobServices/default/containers/";

/// What one pair's wiring is made of. The subscription and resource group are those of the
/// storage accounts (both in the same group); unknown ones are left to `az` to look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub subscription: Option<String>,
    pub resource_group: Option<String>,
    /// The account of the blobs: the system topic's source.
    pub account: String,
    /// The account of the queue (usually the same).
    pub queue_account: String,
    pub queue: String,
    pub container: String,
    /// The pair's key prefix.
    pub prefix: String,
}

/// A storage account's resource id.
pub fn account_id(subscription: &str, resource_group: &str, account: &str) -> String {
    format!(
        "/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/\
         Microsoft.Storage/storageAccounts/{account}"
    )
}

/// The subject filter of a pair: its container's blobs under its prefix.
pub fn subject_prefix(container: &str, pair_prefix: &str) -> String {
    match filter_prefix(pair_prefix) {
        Some(p) => format!("{SUBJECT_ROOT}{container}/blobs/{p}"),
        None => format!("{SUBJECT_ROOT}{container}/"),
    }
}

/// Event Grid names: 3-64 letters, digits and '-'.
fn arm_name(s: &str) -> String {
    s.chars().take(64).collect()
}

impl Want {
    /// The blob account's resource id, when subscription and resource group are known.
    pub fn account_id(&self) -> Option<String> {
        Some(account_id(
            self.subscription.as_deref()?,
            self.resource_group.as_deref()?,
            &self.account,
        ))
    }

    /// The queue account's resource id, when subscription and resource group are known.
    pub fn queue_account_id(&self) -> Option<String> {
        Some(account_id(
            self.subscription.as_deref()?,
            self.resource_group.as_deref()?,
            &self.queue_account,
        ))
    }

    /// The system topic slate makes when the account has none (an account has one at most).
    pub fn topic_name(&self) -> String {
        arm_name(&format!("slate-{}", self.account))
    }

    /// slate's event subscription for the queue.
    pub fn subscription_name(&self) -> String {
        arm_name(&format!("slate-{}", self.queue))
    }

    pub fn subject(&self) -> String {
        subject_prefix(&self.container, &self.prefix)
    }

    /// The body of the system topic's PUT.
    pub fn topic_body(&self, location: &str, source_id: &str) -> Value {
        json!({
            "location": location,
            "properties": {"source": source_id, "topicType": TOPIC_TYPE},
        })
    }

    /// The body of the event subscription's PUT: the queue, slate's event types, the pair's
    /// subject. An earlier subscription of this name to the same queue (another pair's) is
    /// widened to cover both, and its retry policy, dead-letter destination and labels kept.
    pub fn subscription_body(&self, queue_account_id: &str, existing: Option<&Value>) -> Value {
        let mut types: Vec<String> = EG_EVENTS.iter().map(|s| s.to_string()).collect();
        let mut subject = self.subject();
        let mut props = json!({});
        if let Some(e) = existing.map(EventSub::parse) {
            if self.delivers(&e) {
                if let Some(have) = &e.included {
                    for t in have {
                        if !types.contains(t) {
                            types.push(t.clone());
                        }
                    }
                }
                subject = common_prefix(&subject, &e.begins);
            }
            for k in ["retryPolicy", "deadLetterDestination", "labels"] {
                if let Some(v) = existing.and_then(|v| v["properties"].get(k)) {
                    props[k] = v.clone();
                }
            }
        }
        props["destination"] = json!({
            "endpointType": "StorageQueue",
            "properties": {"resourceId": queue_account_id, "queueName": self.queue},
        });
        props["filter"] = json!({
            "includedEventTypes": types,
            "subjectBeginsWith": subject,
        });
        props["eventDeliverySchema"] = json!(SCHEMA);
        json!({ "properties": props })
    }

    /// Whether an event subscription delivers to this pair's queue.
    pub fn delivers(&self, e: &EventSub) -> bool {
        e.endpoint_type.eq_ignore_ascii_case("StorageQueue")
            && e.queue_name.as_deref() == Some(self.queue.as_str())
            && e.resource_id.as_deref().is_some_and(|r| {
                r.to_ascii_lowercase().ends_with(&format!(
                    "/storageaccounts/{}",
                    self.queue_account.to_ascii_lowercase()
                ))
            })
    }
}

/// The longest common start of two subject filters (an empty one filters nothing).
fn common_prefix(a: &str, b: &str) -> String {
    if a.is_empty() || b.is_empty() {
        return String::new();
    }
    a.chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect()
}

/// An event subscription as ARM answers it (the parts slate looks at).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventSub {
    pub name: String,
    pub endpoint_type: String,
    pub resource_id: Option<String>,
    pub queue_name: Option<String>,
    /// None: every event type.
    pub included: Option<Vec<String>>,
    pub begins: String,
    pub ends: String,
    pub case_sensitive: bool,
    pub advanced_filters: usize,
    pub state: Option<String>,
    pub schema: Option<String>,
}

impl EventSub {
    pub fn parse(v: &Value) -> EventSub {
        let p = &v["properties"];
        let f = &p["filter"];
        let s = |v: &Value| v.as_str().map(str::to_string);
        EventSub {
            name: s(&v["name"]).unwrap_or_default(),
            endpoint_type: s(&p["destination"]["endpointType"]).unwrap_or_default(),
            resource_id: s(&p["destination"]["properties"]["resourceId"]),
            queue_name: s(&p["destination"]["properties"]["queueName"]),
            included: f["includedEventTypes"].as_array().map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            }),
            begins: s(&f["subjectBeginsWith"]).unwrap_or_default(),
            ends: s(&f["subjectEndsWith"]).unwrap_or_default(),
            case_sensitive: f["isSubjectCaseSensitive"].as_bool().unwrap_or(false),
            advanced_filters: f["advancedFilters"].as_array().map_or(0, Vec::len),
            state: s(&p["provisioningState"]),
            schema: s(&p["eventDeliverySchema"]),
        }
    }

    /// Whether its subject filter lets through every blob under `subject`.
    pub fn covers_subject(&self, subject: &str) -> bool {
        if self.case_sensitive {
            subject.starts_with(&self.begins)
        } else {
            subject
                .to_ascii_lowercase()
                .starts_with(&self.begins.to_ascii_lowercase())
        }
    }

    fn sends(&self, event_type: &str) -> bool {
        self.included
            .as_ref()
            .is_none_or(|t| t.iter().any(|x| x.eq_ignore_ascii_case(event_type)))
    }

    /// Whether Event Grid has made it (a PUT answers before it has).
    pub fn provisioned(&self) -> bool {
        self.state.as_deref() == Some("Succeeded")
    }

    /// Whether it sends every event slate follows of the pair's blobs, as slate reads them.
    pub fn covers(&self, want: &Want) -> bool {
        want.delivers(self)
            && self.covers_subject(&want.subject())
            && EG_EVENTS.iter().all(|t| self.sends(t))
            && self.ends.is_empty()
            && self.advanced_filters == 0
            && self.schema.as_deref().is_none_or(|s| s == SCHEMA)
            && self.provisioned()
    }

    pub fn describe(&self) -> String {
        format!(
            "event subscription '{}' ({}{})",
            self.name,
            self.included
                .as_ref()
                .map(|t| t.join(", "))
                .unwrap_or_else(|| "every event type".into()),
            if self.begins.is_empty() {
                String::new()
            } else {
                format!(" under '{}'", self.begins)
            }
        )
    }
}

/// The system topic among `topics` (a list answer's `value`) whose source is `account`: its
/// id and name.
pub fn find_topic(topics: &[Value], account: &str) -> Option<(String, String)> {
    let suffix = format!("/storageaccounts/{}", account.to_ascii_lowercase());
    topics.iter().find_map(|t| {
        let source = t["properties"]["source"].as_str()?.to_ascii_lowercase();
        (source.ends_with(&suffix)
            && t["properties"]["topicType"]
                .as_str()
                .is_none_or(|ty| ty.eq_ignore_ascii_case(TOPIC_TYPE)))
        .then(|| {
            Some((
                t["id"].as_str()?.to_string(),
                t["name"].as_str()?.to_string(),
            ))
        })
        .flatten()
    })
}

/// What the system topic's event subscriptions (`subs`, as listed) lack for events of the
/// pair to reach its queue.
pub fn check_subscriptions(subs: &[Value], want: &Want) -> Vec<Finding> {
    let broken = |line: String| Finding { broken: true, line };
    let warn = |line: String| Finding {
        broken: false,
        line,
    };
    let all: Vec<EventSub> = subs.iter().map(EventSub::parse).collect();
    let ours: Vec<&EventSub> = all.iter().filter(|e| want.delivers(e)).collect();
    if ours.is_empty() {
        return vec![broken(format!(
            "no event subscription of the system topic delivers to queue {} of account {} \
             (it has {} other{}): run `slate events setup`",
            want.queue,
            want.queue_account,
            all.len(),
            if all.len() == 1 { "" } else { "s" }
        ))];
    }
    let subject = want.subject();
    let within: Vec<&&EventSub> = ours.iter().filter(|e| e.covers_subject(&subject)).collect();
    if within.is_empty() {
        return vec![broken(format!(
            "{} filters on a subject outside the pair's ({subject}): no event of the pair's \
             blobs is sent",
            ours[0].describe()
        ))];
    }
    let mut out = Vec::new();
    let live: Vec<&&&EventSub> = within.iter().filter(|e| e.provisioned()).collect();
    if live.is_empty() {
        out.push(broken(format!(
            "{} is in provisioning state {}: Event Grid delivers nothing through it yet",
            within[0].describe(),
            within[0].state.as_deref().unwrap_or("(none)")
        )));
        return out;
    }
    for e in &live {
        if let Some(s) = e.schema.as_deref().filter(|s| {
            !s.eq_ignore_ascii_case(SCHEMA) && !s.eq_ignore_ascii_case("CloudEventSchemaV1_0")
        }) {
            out.push(broken(format!(
                "{} delivers in schema {s}: slate reads EventGridSchema and CloudEventSchemaV1_0",
                e.describe()
            )));
        }
        if !e.ends.is_empty() {
            out.push(warn(format!(
                "{} filters on a subject ending '{}': changes of other blobs wait for the drift \
                 check",
                e.describe(),
                e.ends
            )));
        }
        if e.advanced_filters > 0 {
            out.push(warn(format!(
                "{} has {} advanced filter{}: changes they leave out wait for the drift check",
                e.describe(),
                e.advanced_filters,
                if e.advanced_filters == 1 { "" } else { "s" }
            )));
        }
    }
    for t in EG_EVENTS {
        if !live.iter().any(|e| e.sends(t)) {
            let line = format!("no event subscription to queue {} sends {t}", want.queue);
            out.push(if EG_REQUIRED.contains(&t) {
                broken(format!("{line}: those changes never reach the daemon"))
            } else {
                warn(format!(
                    "{line}: those changes (hierarchical namespace accounts) wait for the drift \
                     check"
                ))
            });
        }
    }
    out
}

/// A word for a POSIX shell: as it is when it needs no quoting, else in single quotes.
fn sh(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// What the `az` commands and the template say for the values slate does not know: a lookup
/// `az` makes itself.
fn lookup(want: &Want, what: &str) -> String {
    let rg = want
        .resource_group
        .as_deref()
        .map(|g| format!(" --resource-group {}", sh(g)))
        .unwrap_or_default();
    let sub = want
        .subscription
        .as_deref()
        .map(|s| format!(" --subscription {}", sh(s)))
        .unwrap_or_default();
    format!(
        "\"$(az storage account show --name {}{rg}{sub} --query {what} --output tsv)\"",
        sh(&want.account)
    )
}

/// The Azure CLI commands that make the system topic and the event subscription (values
/// slate does not know are looked up by `az` itself: the account's id, group and region).
pub fn az_commands(want: &Want) -> Vec<String> {
    let sub = want
        .subscription
        .as_deref()
        .map(|s| format!(" --subscription {}", sh(s)))
        .unwrap_or_default();
    let rg = want
        .resource_group
        .as_deref()
        .map(sh)
        .unwrap_or_else(|| lookup(want, "resourceGroup"));
    let source = want
        .account_id()
        .map(|s| sh(&s))
        .unwrap_or_else(|| lookup(want, "id"));
    // queue and account names are letters and digits ('-' in a queue's): safe in quotes
    let endpoint = match want.queue_account_id() {
        Some(id) => sh(&format!("{id}/queueservices/default/queues/{}", want.queue)),
        None => format!(
            "\"$(az storage account show --name {}{sub} --query id --output tsv)\
             /queueservices/default/queues/{}\"",
            want.queue_account, want.queue
        ),
    };
    commands(want, &sub, &rg, &source, &endpoint)
}

fn commands(want: &Want, sub: &str, rg: &str, source: &str, endpoint: &str) -> Vec<String> {
    vec![
        format!(
            "az eventgrid system-topic create{sub} --resource-group {rg} --name {} \
             --location {} --topic-type {TOPIC_TYPE} --source {source}",
            sh(&want.topic_name()),
            lookup(want, "location"),
        ),
        format!(
            "az eventgrid system-topic event-subscription create{sub} --resource-group {rg} \
             --system-topic-name {} --name {} --endpoint-type storagequeue --endpoint {endpoint} \
             --included-event-types {} --subject-begins-with {} --event-delivery-schema \
             eventgridschema",
            sh(&want.topic_name()),
            sh(&want.subscription_name()),
            EG_EVENTS.join(" "),
            sh(&want.subject()),
        ),
    ]
}

/// The command that deploys [`arm_template`] saved as `file`.
pub fn deploy_command(want: &Want, file: &str) -> String {
    let sub = want
        .subscription
        .as_deref()
        .map(|s| format!(" --subscription {}", sh(s)))
        .unwrap_or_default();
    let rg = want
        .resource_group
        .as_deref()
        .map(sh)
        .unwrap_or_else(|| lookup(want, "resourceGroup"));
    format!(
        "az deployment group create{sub} --resource-group {rg} --template-file {} \
         --parameters location={}",
        sh(file),
        lookup(want, "location")
    )
}

/// An ARM template (deployed into the storage account's resource group) that makes the same
/// system topic and event subscription as setup.
pub fn arm_template(want: &Want) -> Value {
    let id = |account: &str, known: Option<String>| {
        known.unwrap_or_else(|| {
            format!("[resourceId('Microsoft.Storage/storageAccounts', '{account}')]")
        })
    };
    let source = id(&want.account, want.account_id());
    let queue_account = id(&want.queue_account, want.queue_account_id());
    let topic = want.topic_name();
    let mut subscription = want.subscription_body(&queue_account, None);
    subscription["type"] = json!("Microsoft.EventGrid/systemTopics/eventSubscriptions");
    subscription["apiVersion"] = json!(EVENTGRID_API);
    subscription["name"] = json!(format!("{topic}/{}", want.subscription_name()));
    subscription["dependsOn"] = json!([format!(
        "[resourceId('Microsoft.EventGrid/systemTopics', '{topic}')]"
    )]);
    let mut system_topic = want.topic_body("[parameters('location')]", &source);
    system_topic["type"] = json!("Microsoft.EventGrid/systemTopics");
    system_topic["apiVersion"] = json!(EVENTGRID_API);
    system_topic["name"] = json!(topic);
    json!({
        "$schema": "https://schema.management.azure.com/schemas/2019-04-01/deploymentTemplate.json#",
        "contentVersion": "1.0.0.0",
        "parameters": {
            "location": {
                "type": "string",
                "defaultValue": "[resourceGroup().location]",
                "metadata": {"description": format!(
                    "The region of storage account {}: a system topic lives in its source's",
                    want.account
                )},
            },
        },
        "resources": [system_topic, subscription],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want(sub: Option<&str>, rg: Option<&str>, prefix: &str) -> Want {
        Want {
            subscription: sub.map(str::to_string),
            resource_group: rg.map(str::to_string),
            account: "acct".into(),
            queue_account: "acct".into(),
            queue: "slate-q".into(),
            container: "content".into(),
            prefix: prefix.into(),
        }
    }

    const ID: &str =
        "/subscriptions/s-1/resourceGroups/rg1/providers/Microsoft.Storage/storageAccounts/acct";

    fn sub(queue: &str, types: Option<&[&str]>, begins: &str, state: &str, extra: Value) -> Value {
        let mut filter = json!({"subjectBeginsWith": begins, "subjectEndsWith": ""});
        if let Some(t) = types {
            filter["includedEventTypes"] = json!(t);
        }
        if let Value::Object(m) = extra {
            for (k, v) in m {
                filter[k] = v;
            }
        }
        json!({"name": "n1", "properties": {
            "destination": {"endpointType": "StorageQueue",
                            "properties": {"resourceId": ID, "queueName": queue}},
            "filter": filter,
            "provisioningState": state,
            "eventDeliverySchema": "EventGridSchema",
        }})
    }

    #[test]
    fn subjects_and_names() {
        let cases = [
            ("content", "", "/blobServices/default/containers/content/"),
            (
                "content",
                "data",
                "/blobServices/default/containers/content/blobs/data/",
            ),
            (
                "content",
                "/a/b/",
                "/blobServices/default/containers/content/blobs/a/b/",
            ),
        ];
        for (c, p, s) in cases {
            assert_eq!(subject_prefix(c, p), s, "{c} {p}");
        }
        let w = want(Some("s-1"), Some("rg1"), "");
        assert_eq!(w.account_id().as_deref(), Some(ID));
        assert_eq!(want(None, Some("rg1"), "").account_id(), None);
        assert_eq!(w.topic_name(), "slate-acct");
        assert_eq!(w.subscription_name(), "slate-slate-q");
        let long = Want {
            queue: "q".repeat(63),
            ..w
        };
        assert_eq!(long.subscription_name().len(), 64);
    }

    #[test]
    fn the_bodies_follow_the_rest_reference() {
        let w = want(Some("s-1"), Some("rg1"), "data");
        assert_eq!(
            w.topic_body("westeurope", ID),
            json!({"location": "westeurope",
                   "properties": {"source": ID, "topicType": "Microsoft.Storage.StorageAccounts"}})
        );
        assert_eq!(
            w.subscription_body(ID, None),
            json!({"properties": {
                "destination": {"endpointType": "StorageQueue",
                                "properties": {"resourceId": ID, "queueName": "slate-q"}},
                "filter": {"includedEventTypes": EG_EVENTS,
                           "subjectBeginsWith": "/blobServices/default/containers/content/blobs/data/"},
                "eventDeliverySchema": "EventGridSchema",
            }})
        );
    }

    #[test]
    fn an_earlier_subscription_is_widened_and_its_settings_kept() {
        let w = want(Some("s-1"), Some("rg1"), "data");
        // (existing, subject after, extra types kept)
        let retry = json!({"maxDeliveryAttempts": 5, "eventTimeToLiveInMinutes": 60});
        let mut other_pair = sub(
            "slate-q",
            Some(&[
                "Microsoft.Storage.BlobCreated",
                "Microsoft.Storage.BlobTierChanged",
            ]),
            "/blobServices/default/containers/content/blobs/dat2/",
            "Succeeded",
            json!({}),
        );
        other_pair["properties"]["retryPolicy"] = retry.clone();
        let cases: Vec<(Value, &str, bool)> = vec![
            (
                other_pair,
                "/blobServices/default/containers/content/blobs/dat",
                true,
            ),
            (
                sub(
                    "slate-q",
                    None,
                    "/blobServices/default/containers/other/",
                    "Succeeded",
                    json!({}),
                ),
                "/blobServices/default/containers/",
                false,
            ),
            (sub("slate-q", None, "", "Succeeded", json!({})), "", false),
            // pointed at another queue: not widened, repointed
            (
                sub(
                    "elsewhere",
                    None,
                    "/blobServices/default/containers/other/",
                    "Succeeded",
                    json!({}),
                ),
                "/blobServices/default/containers/content/blobs/data/",
                false,
            ),
        ];
        for (existing, subject, tier) in cases {
            let b = w.subscription_body(ID, Some(&existing));
            assert_eq!(
                b["properties"]["filter"]["subjectBeginsWith"], subject,
                "{existing}"
            );
            assert_eq!(
                b["properties"]["destination"]["properties"]["queueName"],
                "slate-q"
            );
            let types = b["properties"]["filter"]["includedEventTypes"]
                .as_array()
                .unwrap()
                .clone();
            assert_eq!(
                types
                    .iter()
                    .any(|t| t == "Microsoft.Storage.BlobTierChanged"),
                tier,
                "{existing}"
            );
            assert_eq!(
                b["properties"]["retryPolicy"].is_object(),
                existing["properties"]["retryPolicy"].is_object()
            );
            // what was written covers the pair
            let mut read = b.clone();
            read["name"] = json!("slate-slate-q");
            read["properties"]["provisioningState"] = json!("Succeeded");
            assert!(EventSub::parse(&read).covers(&w), "{b}");
        }
    }

    #[test]
    fn coverage_reads_filters_as_event_grid_does() {
        let w = want(Some("s-1"), Some("rg1"), "data");
        let all = &EG_EVENTS[..];
        let s = "/blobServices/default/containers/content/blobs/data/";
        // (subscription, covers)
        let cases: Vec<(Value, bool)> = vec![
            (sub("slate-q", Some(all), s, "Succeeded", json!({})), true),
            (sub("slate-q", None, "", "Succeeded", json!({})), true),
            (
                sub(
                    "slate-q",
                    Some(all),
                    "/blobServices/default/containers/content/",
                    "Succeeded",
                    json!({}),
                ),
                true,
            ),
            // Event Grid compares subjects without case unless told to
            (
                sub(
                    "slate-q",
                    Some(all),
                    "/blobServices/default/containers/CONTENT/",
                    "Succeeded",
                    json!({}),
                ),
                true,
            ),
            (
                sub(
                    "slate-q",
                    Some(all),
                    "/blobServices/default/containers/CONTENT/",
                    "Succeeded",
                    json!({"isSubjectCaseSensitive": true}),
                ),
                false,
            ),
            (
                sub("slate-q", Some(&EG_REQUIRED), s, "Succeeded", json!({})),
                false,
            ),
            (sub("slate-q", Some(all), s, "Creating", json!({})), false),
            (sub("other-q", Some(all), s, "Succeeded", json!({})), false),
            (
                sub(
                    "slate-q",
                    Some(all),
                    "/blobServices/default/containers/content/blobs/data/sub/",
                    "Succeeded",
                    json!({}),
                ),
                false,
            ),
            (
                sub(
                    "slate-q",
                    Some(all),
                    s,
                    "Succeeded",
                    json!({"subjectEndsWith": ".jpg"}),
                ),
                false,
            ),
            (
                sub(
                    "slate-q",
                    Some(all),
                    s,
                    "Succeeded",
                    json!({"advancedFilters": [{"operatorType": "NumberGreaterThan", "key": "data.contentLength", "value": 0}]}),
                ),
                false,
            ),
        ];
        for (v, covers) in cases {
            assert_eq!(EventSub::parse(&v).covers(&w), covers, "{v}");
        }
    }

    #[test]
    fn check_names_what_cannot_deliver() {
        let w = want(Some("s-1"), Some("rg1"), "data");
        let all = &EG_EVENTS[..];
        let s = "/blobServices/default/containers/content/blobs/data/";
        // (subscriptions, a line that says, broken)
        let cases: Vec<(Vec<Value>, Option<&str>, bool)> = vec![
            (vec![sub("slate-q", Some(all), s, "Succeeded", json!({}))], None, false),
            (
                vec![sub("other-q", Some(all), s, "Succeeded", json!({}))],
                Some("no event subscription of the system topic delivers to queue slate-q of account acct (it has 1 other)"),
                true,
            ),
            (
                vec![sub(
                    "slate-q",
                    Some(all),
                    "/blobServices/default/containers/logs/",
                    "Succeeded",
                    json!({}),
                )],
                Some("filters on a subject outside the pair's"),
                true,
            ),
            (
                vec![sub("slate-q", Some(all), s, "Failed", json!({}))],
                Some("provisioning state Failed"),
                true,
            ),
            (
                vec![sub(
                    "slate-q",
                    Some(&["Microsoft.Storage.BlobCreated"]),
                    s,
                    "Succeeded",
                    json!({}),
                )],
                Some("sends Microsoft.Storage.BlobDeleted: those changes never reach"),
                true,
            ),
            (
                vec![sub("slate-q", Some(&EG_REQUIRED), s, "Succeeded", json!({}))],
                Some("sends Microsoft.Storage.BlobRenamed: those changes (hierarchical"),
                false,
            ),
            (
                vec![sub(
                    "slate-q",
                    Some(all),
                    s,
                    "Succeeded",
                    json!({"subjectEndsWith": ".jpg"}),
                )],
                Some("filters on a subject ending '.jpg'"),
                false,
            ),
        ];
        for (subs, says, broken) in cases {
            let f = check_subscriptions(&subs, &w);
            match says {
                None => assert_eq!(f, vec![], "{subs:?}"),
                Some(t) => {
                    let hit = f.iter().find(|f| f.line.contains(t));
                    assert!(hit.is_some(), "{t}: {f:?}");
                    assert_eq!(hit.map(|f| f.broken), Some(broken), "{t}: {f:?}");
                    assert_eq!(f.iter().any(|f| f.broken), broken, "{t}: {f:?}");
                }
            }
        }
    }

    #[test]
    fn the_accounts_system_topic_is_found_by_its_source() {
        let topics = vec![
            json!({"id": "/x/other", "name": "other", "properties": {"source": "/subscriptions/s/resourceGroups/r/providers/Microsoft.Storage/storageAccounts/acct2", "topicType": TOPIC_TYPE}}),
            json!({"id": "/x/rg", "name": "rg-events", "properties": {"source": "/subscriptions/s/resourceGroups/r", "topicType": "Microsoft.Resources.ResourceGroups"}}),
            json!({"id": "/x/mine", "name": "acct-1f2e", "properties": {"source": "/subscriptions/s/resourceGroups/R/providers/microsoft.storage/storageaccounts/ACCT", "topicType": TOPIC_TYPE}}),
        ];
        assert_eq!(
            find_topic(&topics, "acct"),
            Some(("/x/mine".into(), "acct-1f2e".into()))
        );
        assert_eq!(find_topic(&topics, "acct3"), None);
        assert_eq!(
            find_topic(&topics, "acct2").map(|t| t.1),
            Some("other".into())
        );
    }

    #[test]
    fn shell_words_are_quoted_when_they_need_it() {
        let cases = [
            ("plain-word_1", "plain-word_1"),
            ("/a/b:c", "/a/b:c"),
            ("a b", "'a b'"),
            ("it's", "'it'\\''s'"),
            ("$(x)", "'$(x)'"),
            ("", "''"),
        ];
        for (s, want) in cases {
            assert_eq!(sh(s), want, "{s}");
        }
    }

    #[test]
    fn the_commands_fill_in_what_is_known_and_look_up_the_rest() {
        let known = az_commands(&want(Some("s-1"), Some("rg1"), "my data"));
        assert_eq!(known.len(), 2);
        assert_eq!(
            known[0],
            format!(
                "az eventgrid system-topic create --subscription s-1 --resource-group rg1 \
                 --name slate-acct --location \"$(az storage account show --name acct \
                 --resource-group rg1 --subscription s-1 --query location --output tsv)\" \
                 --topic-type Microsoft.Storage.StorageAccounts --source {ID}"
            )
        );
        assert_eq!(
            known[1],
            format!(
                "az eventgrid system-topic event-subscription create --subscription s-1 \
                 --resource-group rg1 --system-topic-name slate-acct --name slate-slate-q \
                 --endpoint-type storagequeue --endpoint {ID}/queueservices/default/queues/slate-q \
                 --included-event-types {} --subject-begins-with \
                 '/blobServices/default/containers/content/blobs/my data/' \
                 --event-delivery-schema eventgridschema",
                EG_EVENTS.join(" ")
            )
        );
        let unknown = az_commands(&want(None, None, ""));
        assert!(
            unknown[0].contains(
                "--resource-group \"$(az storage account show --name acct --query resourceGroup --output tsv)\""
            ) && unknown[0].contains(
                "--source \"$(az storage account show --name acct --query id --output tsv)\""
            ) && !unknown[0].contains("--subscription"),
            "{}",
            unknown[0]
        );
        assert!(
            unknown[1].contains(
                "--endpoint \"$(az storage account show --name acct --query id --output tsv)/queueservices/default/queues/slate-q\""
            ) && unknown[1].contains("--subject-begins-with /blobServices/default/containers/content/ "),
            "{}",
            unknown[1]
        );
        assert_eq!(
            deploy_command(&want(Some("s-1"), Some("rg1"), ""), "t.json"),
            "az deployment group create --subscription s-1 --resource-group rg1 --template-file \
             t.json --parameters location=\"$(az storage account show --name acct \
             --resource-group rg1 --subscription s-1 --query location --output tsv)\""
        );
    }

    #[test]
    fn the_template_makes_the_same_two_resources() {
        for (w, source) in [
            (want(Some("s-1"), Some("rg1"), "data"), ID.to_string()),
            (
                want(None, None, "data"),
                "[resourceId('Microsoft.Storage/storageAccounts', 'acct')]".to_string(),
            ),
        ] {
            let t = arm_template(&w);
            let r = t["resources"].as_array().unwrap();
            assert_eq!(r.len(), 2);
            assert_eq!(r[0]["type"], "Microsoft.EventGrid/systemTopics");
            assert_eq!(r[0]["apiVersion"], EVENTGRID_API);
            assert_eq!(r[0]["name"], "slate-acct");
            assert_eq!(r[0]["location"], "[parameters('location')]");
            assert_eq!(r[0]["properties"]["source"], source);
            assert_eq!(r[0]["properties"]["topicType"], TOPIC_TYPE);
            assert_eq!(
                r[1]["type"],
                "Microsoft.EventGrid/systemTopics/eventSubscriptions"
            );
            assert_eq!(r[1]["name"], "slate-acct/slate-slate-q");
            assert_eq!(
                r[1]["dependsOn"][0],
                "[resourceId('Microsoft.EventGrid/systemTopics', 'slate-acct')]"
            );
            let p = &r[1]["properties"];
            assert_eq!(p["destination"]["endpointType"], "StorageQueue");
            assert_eq!(p["destination"]["properties"]["resourceId"], source);
            assert_eq!(p["destination"]["properties"]["queueName"], "slate-q");
            assert_eq!(p["filter"]["includedEventTypes"], json!(EG_EVENTS));
            assert_eq!(
                p["filter"]["subjectBeginsWith"],
                "/blobServices/default/containers/content/blobs/data/"
            );
            assert_eq!(p["eventDeliverySchema"], "EventGridSchema");
            assert!(t["parameters"]["location"].is_object());
        }
    }
}
