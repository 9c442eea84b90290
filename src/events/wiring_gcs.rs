//! The wiring a GCS source needs to deliver its events to a Pub/Sub pull subscription, as pure
//! functions: the names (`--events pubsub://projects/P/subscriptions/S`, `--topic`), the
//! bucket's notification configuration slate wants and whether one read back covers a pair,
//! and the topic's IAM policy with the bucket's GCS service agent let publish. `slate events
//! setup` / `check` for `gs://` (`cli/events_gcs.rs`) do the calls around these.
//!
//! Unlike S3, GCS keeps any number of notification configurations per bucket, each its own
//! resource: setup adds slate's when none covers the pair and leaves every other alone.

use serde_json::{json, Value};

use super::wiring::{filter_prefix, Finding};

/// The event types slate follows: what `events::gcs` turns into upserts and deletes.
pub const GCS_EVENTS: [&str; 4] = [
    "OBJECT_FINALIZE",
    "OBJECT_DELETE",
    "OBJECT_METADATA_UPDATE",
    "OBJECT_ARCHIVE",
];

/// Without these no write or delete reaches the daemon; the others (metadata changes, the
/// archive of a versioned bucket's live object) only some changes.
const GCS_REQUIRED: [&str; 2] = ["OBJECT_FINALIZE", "OBJECT_DELETE"];

/// The payload whose data is the object's resource (size, etag, generations).
pub const PAYLOAD: &str = "JSON_API_V1";

/// The role slate grants the GCS service agent on the topic.
pub const PUBLISHER: &str = "roles/pubsub.publisher";

/// Roles that carry `pubsub.topics.publish`: a binding in any of them lets the agent publish.
const PUBLISHING_ROLES: [&str; 5] = [
    PUBLISHER,
    "roles/pubsub.editor",
    "roles/pubsub.admin",
    "roles/editor",
    "roles/owner",
];

/// How a topic is named in a notification configuration.
const TOPIC_HOST: &str = "//pubsub.googleapis.com/";

/// The Pub/Sub resources of a wiring: `projects/P/subscriptions/S` and `projects/Q/topics/T`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub subscription: String,
    pub topic: String,
    /// P: the subscription's project.
    pub project: String,
}

/// Whether `id` is a Pub/Sub topic or subscription id: 3-255 characters, a letter first,
/// then letters, digits and `-_.~+%`, not starting with `goog`.
fn valid_id(id: &str) -> bool {
    (3..=255).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_alphabetic())
        && !id.to_ascii_lowercase().starts_with("goog")
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.~+%".contains(&b))
}

/// The names of `--events pubsub://projects/P/subscriptions/S` and `--topic`: the topic is
/// `projects/P/topics/S` when not given.
pub fn names(events: &str, topic: Option<&str>) -> Result<Names, String> {
    let subscription = super::pubsub::subscription_name(events).map_err(|e| e.to_string())?;
    let parts: Vec<&str> = subscription.split('/').collect();
    let (project, sub_id) = (parts[1].to_string(), parts[3]);
    if !valid_id(sub_id) {
        return Err(format!(
            "'{events}': a subscription id is 3-255 letters, digits and '-_.~+%', a letter first"
        ));
    }
    let topic = match topic {
        None => format!("projects/{project}/topics/{sub_id}"),
        Some(t) => {
            let t = t.strip_prefix(TOPIC_HOST).unwrap_or(t);
            let p: Vec<&str> = t.split('/').collect();
            let ok = p.len() == 4
                && p[0] == "projects"
                && p[2] == "topics"
                && !p[1].is_empty()
                && valid_id(p[3]);
            if !ok {
                return Err(format!(
                    "--topic '{t}': expected projects/PROJECT/topics/TOPIC (a topic id is \
                     3-255 letters, digits and '-_.~+%', a letter first)"
                ));
            }
            t.to_string()
        }
    };
    Ok(Names {
        subscription,
        topic,
        project,
    })
}

/// One of a bucket's notification configurations, as the JSON API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub id: Option<String>,
    /// `projects/P/topics/T` (the API's `//pubsub.googleapis.com/` taken off).
    pub topic: String,
    pub payload_format: String,
    /// Empty: every event type.
    pub event_types: Vec<String>,
    pub prefix: Option<String>,
}

impl Config {
    /// How a configuration is named in a message.
    pub fn describe(&self) -> String {
        format!(
            "notification config '{}' (topic {}, {}{}, payload {})",
            self.id.as_deref().unwrap_or("(no id)"),
            self.topic,
            if self.event_types.is_empty() {
                "every event type".to_string()
            } else {
                self.event_types.join(", ")
            },
            self.prefix
                .as_deref()
                .map(|p| format!(" under '{p}'"))
                .unwrap_or_default(),
            self.payload_format
        )
    }

    /// Whether the configuration sends events of every key under the pair's prefix.
    fn covers_prefix(&self, pair_prefix: &str) -> bool {
        match (&self.prefix, filter_prefix(pair_prefix)) {
            (None, _) => true,
            (Some(have), Some(want)) => want.starts_with(have.as_str()),
            (Some(_), None) => false,
        }
    }

    fn sends(&self, event_type: &str) -> bool {
        self.event_types.is_empty() || self.event_types.iter().any(|e| e == event_type)
    }
}

/// The topic's name without the API's `//pubsub.googleapis.com/`.
fn short_topic(t: &str) -> &str {
    t.strip_prefix(TOPIC_HOST).unwrap_or(t)
}

/// The configurations of a `GET /storage/v1/b/BUCKET/notificationConfigs` answer (no `items`:
/// none).
pub fn parse_configs(answer: &Value) -> Result<Vec<Config>, String> {
    let items = match answer.get("items") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err("notificationConfigs: items is not a list".into()),
    };
    items
        .iter()
        .map(|c| {
            let topic = c["topic"]
                .as_str()
                .ok_or("notificationConfigs: a config names no topic")?;
            let id = match &c["id"] {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            };
            Ok(Config {
                id,
                topic: short_topic(topic).to_string(),
                payload_format: c["payload_format"].as_str().unwrap_or("NONE").to_string(),
                event_types: c["event_types"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|e| e.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
                prefix: c["object_name_prefix"]
                    .as_str()
                    .filter(|p| !p.is_empty())
                    .map(str::to_string),
            })
        })
        .collect()
}

/// The body of the `POST …/notificationConfigs` that makes slate's configuration: its events
/// of the pair's keys to `topic`.
pub fn config_body(topic: &str, pair_prefix: &str) -> Value {
    let mut body = json!({
        "topic": format!("{TOPIC_HOST}{}", short_topic(topic)),
        "payload_format": PAYLOAD,
        "event_types": GCS_EVENTS,
    });
    if let Some(p) = filter_prefix(pair_prefix) {
        body["object_name_prefix"] = json!(p);
    }
    body
}

/// The configuration among `configs` that already sends every event slate follows of the
/// pair's keys to `topic` with the object's data (then setup has nothing to do).
pub fn covering<'a>(configs: &'a [Config], topic: &str, pair_prefix: &str) -> Option<&'a Config> {
    let topic = short_topic(topic);
    configs.iter().find(|c| {
        c.topic == topic
            && c.payload_format == PAYLOAD
            && c.covers_prefix(pair_prefix)
            && GCS_EVENTS.iter().all(|e| c.sends(e))
    })
}

/// What the bucket's configurations lack for the pair at `pair_prefix` to reach `topic`.
pub fn check_configs(configs: &[Config], topic: &str, pair_prefix: &str) -> Vec<Finding> {
    let topic = short_topic(topic);
    let ours: Vec<&Config> = configs.iter().filter(|c| c.topic == topic).collect();
    if ours.is_empty() {
        return vec![Finding {
            broken: true,
            line: format!(
                "the bucket has no notification config for topic {topic} (it has {} other{}): \
                 run `slate events setup`",
                configs.len(),
                if configs.len() == 1 { "" } else { "s" }
            ),
        }];
    }
    let within: Vec<&&Config> = ours
        .iter()
        .filter(|c| c.covers_prefix(pair_prefix))
        .collect();
    if within.is_empty() {
        return vec![Finding {
            broken: true,
            line: format!(
                "{} filters on a prefix outside the pair's ({}): no event of the pair's keys \
                 is sent",
                ours[0].describe(),
                filter_prefix(pair_prefix).unwrap_or_else(|| "the whole bucket".into())
            ),
        }];
    }
    let mut out = Vec::new();
    if !within.iter().any(|c| c.payload_format == PAYLOAD) {
        out.push(Finding {
            broken: false,
            line: format!(
                "{} sends no object data (payload {PAYLOAD} does): events carry no size or etag",
                within[0].describe()
            ),
        });
    }
    for e in GCS_EVENTS {
        if !within.iter().any(|c| c.sends(e)) {
            let line = format!("no notification config for topic {topic} sends {e}");
            out.push(if GCS_REQUIRED.contains(&e) {
                Finding {
                    broken: true,
                    line: format!("{line}: those changes never reach the daemon"),
                }
            } else {
                Finding {
                    broken: false,
                    line: format!("{line}: those changes wait for the drift check"),
                }
            });
        }
    }
    out
}

/// The member a GCS service agent is bound as.
pub fn agent_member(email: &str) -> String {
    format!("serviceAccount:{email}")
}

/// Whether an IAM policy (a `getIamPolicy` answer) lets `member` publish: a binding without
/// a condition in a role that carries `pubsub.topics.publish`.
pub fn lets_publish(policy: &Value, member: &str) -> bool {
    policy["bindings"].as_array().is_some_and(|bindings| {
        bindings.iter().any(|b| {
            b.get("condition").is_none_or(Value::is_null)
                && b["role"]
                    .as_str()
                    .is_some_and(|r| PUBLISHING_ROLES.contains(&r))
                && b["members"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|x| x.as_str() == Some(member)))
        })
    })
}

/// The policy with `member` in `roles/pubsub.publisher` (its unconditional binding, made when
/// missing), every other binding, the version and the etag kept; None when it already lets
/// `member` publish.
pub fn merge_publisher(policy: &Value, member: &str) -> Result<Option<Value>, String> {
    if lets_publish(policy, member) {
        return Ok(None);
    }
    let mut next = match policy {
        Value::Object(_) => policy.clone(),
        Value::Null => json!({}),
        _ => return Err("the topic's IAM policy is not a JSON object".into()),
    };
    let bindings = next
        .as_object_mut()
        .map(|o| o.entry("bindings").or_insert_with(|| json!([])))
        .and_then(Value::as_array_mut)
        .ok_or("the topic's IAM policy: bindings is not a list")?;
    let slot = bindings.iter_mut().find(|b| {
        b["role"].as_str() == Some(PUBLISHER) && b.get("condition").is_none_or(Value::is_null)
    });
    match slot {
        Some(b) => {
            let members = b
                .as_object_mut()
                .map(|o| o.entry("members").or_insert_with(|| json!([])))
                .and_then(Value::as_array_mut)
                .ok_or("the topic's IAM policy: members is not a list")?;
            members.push(json!(member));
        }
        None => bindings.push(json!({"role": PUBLISHER, "members": [member]})),
    }
    Ok(Some(next))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "projects/p1/topics/slate-ev";

    fn config(topic: &str, payload: &str, events: &[&str], prefix: Option<&str>) -> Config {
        Config {
            id: Some("7".into()),
            topic: topic.into(),
            payload_format: payload.into(),
            event_types: events.iter().map(|s| s.to_string()).collect(),
            prefix: prefix.map(str::to_string),
        }
    }

    #[test]
    fn names_default_the_topic_to_the_subscriptions_id() {
        // (--events, --topic, the subscription and topic, or what the error says)
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            Result<(&'a str, &'a str), &'a str>,
        );
        let cases: &[Case] = &[
            (
                "pubsub://projects/p1/subscriptions/slate-ev",
                None,
                Ok(("projects/p1/subscriptions/slate-ev", T)),
            ),
            (
                "pubsub://projects/p1/subscriptions/slate-ev",
                Some("projects/p2/topics/bucket-events"),
                Ok((
                    "projects/p1/subscriptions/slate-ev",
                    "projects/p2/topics/bucket-events",
                )),
            ),
            (
                "pubsub://projects/p1/subscriptions/slate-ev",
                Some("//pubsub.googleapis.com/projects/p2/topics/t-1"),
                Ok((
                    "projects/p1/subscriptions/slate-ev",
                    "projects/p2/topics/t-1",
                )),
            ),
            (
                "pubsub://projects/p1/subscriptions/slate-ev",
                Some("bucket-events"),
                Err("expected projects/PROJECT/topics/TOPIC"),
            ),
            (
                "pubsub://projects/p1/subscriptions/slate-ev",
                Some("projects/p1/topics/goog-x"),
                Err("a topic id is"),
            ),
            (
                "pubsub://projects/p1/subscriptions/9abc",
                None,
                Err("a letter first"),
            ),
            ("sqs://q", None, Err("pubsub://projects/PROJECT")),
        ];
        for (events, topic, want) in cases {
            let got = names(events, *topic);
            match want {
                Ok((s, t)) => {
                    let n = got.unwrap_or_else(|e| panic!("{events}: {e}"));
                    assert_eq!((n.subscription.as_str(), n.topic.as_str()), (*s, *t));
                    assert_eq!(n.project, "p1");
                }
                Err(w) => {
                    let e = got.expect_err(events);
                    assert!(e.contains(w), "{events} {topic:?}: {e}");
                }
            }
        }
    }

    #[test]
    fn listed_configs_parse() {
        let answer = json!({"kind": "storage#notifications", "items": [
            {"kind": "storage#notification", "id": "3", "etag": "3",
             "topic": "//pubsub.googleapis.com/projects/p1/topics/slate-ev",
             "payload_format": "JSON_API_V1", "object_name_prefix": "data/",
             "event_types": ["OBJECT_FINALIZE", "OBJECT_DELETE"], "custom_attributes": {}},
            {"id": 4, "topic": "projects/p1/topics/other", "payload_format": "NONE"},
            {"id": "5", "topic": "projects/p1/topics/x", "object_name_prefix": ""},
        ]});
        let got = parse_configs(&answer).unwrap();
        assert_eq!(
            got,
            vec![
                Config {
                    id: Some("3".into()),
                    ..config(
                        T,
                        "JSON_API_V1",
                        &["OBJECT_FINALIZE", "OBJECT_DELETE"],
                        Some("data/"),
                    )
                },
                Config {
                    id: Some("4".into()),
                    ..config("projects/p1/topics/other", "NONE", &[], None)
                },
                Config {
                    id: Some("5".into()),
                    ..config("projects/p1/topics/x", "NONE", &[], None)
                },
            ]
        );
        assert_eq!(
            parse_configs(&json!({"kind": "storage#notifications"})),
            Ok(vec![])
        );
        assert!(parse_configs(&json!({"items": {}})).is_err());
        assert!(parse_configs(&json!({"items": [{"id": "1"}]})).is_err());
    }

    #[test]
    fn the_body_names_the_topic_events_and_prefix() {
        assert_eq!(
            config_body(T, "data/sub/"),
            json!({
                "topic": "//pubsub.googleapis.com/projects/p1/topics/slate-ev",
                "payload_format": "JSON_API_V1",
                "event_types": ["OBJECT_FINALIZE", "OBJECT_DELETE", "OBJECT_METADATA_UPDATE",
                                "OBJECT_ARCHIVE"],
                "object_name_prefix": "data/sub/",
            })
        );
        assert!(config_body(T, "").get("object_name_prefix").is_none());
    }

    #[test]
    fn a_config_covers_when_topic_payload_events_and_prefix_all_do() {
        let all = &GCS_EVENTS[..];
        // (config, pair prefix, covers)
        let cases: Vec<(Config, &str, bool)> = vec![
            (config(T, PAYLOAD, all, Some("data/")), "data", true),
            (config(T, PAYLOAD, all, None), "data", true),
            (config(T, PAYLOAD, &[], None), "", true),
            (config(T, PAYLOAD, all, Some("da")), "data/sub", true),
            (config(T, PAYLOAD, all, Some("data/")), "", false),
            (config(T, PAYLOAD, all, Some("data/sub/")), "data", false),
            (config(T, PAYLOAD, all, Some("other/")), "data", false),
            (config(T, "NONE", all, None), "data", false),
            (config(T, PAYLOAD, &GCS_REQUIRED, None), "data", false),
            (
                config("projects/p1/topics/other", PAYLOAD, all, None),
                "data",
                false,
            ),
        ];
        for (c, prefix, want) in cases {
            let configs = [c.clone()];
            assert_eq!(
                covering(&configs, T, prefix).is_some(),
                want,
                "{} / {prefix}",
                c.describe()
            );
        }
        // the API's long topic form names the same topic
        let configs = [config(T, PAYLOAD, all, None)];
        assert!(covering(&configs, &format!("{TOPIC_HOST}{T}"), "x").is_some());
    }

    #[test]
    fn check_names_what_cannot_deliver() {
        let all = &GCS_EVENTS[..];
        let other = config("projects/p1/topics/other", PAYLOAD, all, None);
        // (configs, pair prefix, a line that says, broken)
        let cases: Vec<(Vec<Config>, &str, Option<&str>, bool)> = vec![
            (
                vec![config(T, PAYLOAD, all, Some("data/"))],
                "data",
                None,
                false,
            ),
            (vec![config(T, PAYLOAD, &[], None)], "data", None, false),
            (
                vec![other.clone()],
                "data",
                Some(
                    "no notification config for topic projects/p1/topics/slate-ev (it has 1 other)",
                ),
                true,
            ),
            (
                vec![config(T, PAYLOAD, all, Some("logs/"))],
                "data",
                Some("filters on a prefix outside the pair's (data/)"),
                true,
            ),
            (
                vec![config(
                    T,
                    PAYLOAD,
                    &[
                        "OBJECT_FINALIZE",
                        "OBJECT_METADATA_UPDATE",
                        "OBJECT_ARCHIVE",
                    ],
                    None,
                )],
                "data",
                Some("sends OBJECT_DELETE: those changes never reach"),
                true,
            ),
            (
                vec![config(T, PAYLOAD, &GCS_REQUIRED, None)],
                "data",
                Some("sends OBJECT_METADATA_UPDATE: those changes wait"),
                false,
            ),
            // two configs together cover the events
            (
                vec![
                    config(T, PAYLOAD, &GCS_REQUIRED, None),
                    config(
                        T,
                        PAYLOAD,
                        &["OBJECT_METADATA_UPDATE", "OBJECT_ARCHIVE"],
                        Some("data/"),
                    ),
                ],
                "data",
                None,
                false,
            ),
            (
                vec![config(T, "NONE", all, None)],
                "data",
                Some("sends no object data"),
                false,
            ),
        ];
        for (configs, prefix, says, broken) in cases {
            let f = check_configs(&configs, T, prefix);
            match says {
                None => assert_eq!(f, vec![], "{configs:?}"),
                Some(w) => {
                    let hit = f.iter().find(|f| f.line.contains(w));
                    assert!(hit.is_some(), "{w}: {f:?}");
                    assert_eq!(hit.map(|f| f.broken), Some(broken), "{w}: {f:?}");
                    assert_eq!(f.iter().any(|f| f.broken), broken, "{w}: {f:?}");
                }
            }
        }
    }

    #[test]
    fn the_publisher_binding_is_merged_keeping_the_rest() {
        let m = agent_member("service-42@gs-project-accounts.iam.gserviceaccount.com");
        let viewer = json!({"role": "roles/pubsub.viewer", "members": ["user:a@example.com"]});
        let conditional = json!({"role": PUBLISHER, "members": ["group:g@example.com"],
                                 "condition": {"title": "t", "expression": "true"}});
        // (policy, expected bindings after the merge; None: nothing to change)
        let cases: Vec<(Value, Option<Value>)> = vec![
            (
                json!({"etag": "ACAB"}),
                Some(json!([{"role": PUBLISHER, "members": [m]}])),
            ),
            (
                Value::Null,
                Some(json!([{"role": PUBLISHER, "members": [m]}])),
            ),
            (
                json!({"etag": "ACAB", "version": 1, "bindings": [viewer,
                       {"role": PUBLISHER, "members": ["user:b@example.com"]}]}),
                Some(json!([viewer, {"role": PUBLISHER, "members": ["user:b@example.com", m]}])),
            ),
            // a conditional binding is not the agent's: an unconditional one is added
            (
                json!({"etag": "ACAB", "version": 3, "bindings": [conditional]}),
                Some(json!([conditional, {"role": PUBLISHER, "members": [m]}])),
            ),
            (
                json!({"etag": "ACAB", "bindings": [{"role": PUBLISHER, "members": [m]}]}),
                None,
            ),
            (
                json!({"etag": "ACAB", "bindings": [{"role": "roles/pubsub.admin", "members": [m]}]}),
                None,
            ),
        ];
        for (policy, want) in cases {
            let got = merge_publisher(&policy, &m).unwrap();
            match want {
                None => assert_eq!(got, None, "{policy}"),
                Some(bindings) => {
                    let got = got.unwrap_or_else(|| panic!("expected a change: {policy}"));
                    assert_eq!(got["bindings"], bindings, "{policy}");
                    assert_eq!(got["etag"], policy["etag"], "the etag is kept");
                    assert_eq!(got["version"], policy["version"], "the version is kept");
                    assert!(lets_publish(&got, &m));
                    assert_eq!(merge_publisher(&got, &m).unwrap(), None, "idempotent");
                }
            }
        }
        assert!(!lets_publish(
            &json!({"bindings": [conditional]}),
            "group:g@example.com"
        ));
        assert!(merge_publisher(&json!([1]), &m).is_err());
    }
}
