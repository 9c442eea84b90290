//! The EventBridge route of an S3 source (`slate events setup … --eventbridge`): the bucket
//! sends every event to EventBridge's default bus (`<EventBridgeConfiguration/>`, which does
//! not count against S3's one-rule-per-prefix limit), and a rule of slate's on that bus sends
//! the pair's events to its queue. Each consumer (another daemon, a `slate mount`) gets its
//! own rule and queue, and rules of other teams on the bus are untouched.
//!
//! The rule's name and event pattern are pure and table-tested here; the calls are
//! EventBridge's JSON API, signed with the bucket's own credentials
//! ([`S3CrossBucket::aws_json`]).

use serde_json::{json, Value};

use crate::stores::s3copy::S3CrossBucket;

/// The detail types slate applies (`events::s3` reads them): creations (a lifecycle
/// expiration is an `Object Deleted` with its reason) and tag changes.
pub const DETAIL_TYPES: [&str; 4] = [
    "Object Created",
    "Object Deleted",
    "Object Tags Added",
    "Object Tags Deleted",
];

/// Without these no change reaches the daemon.
const REQUIRED: [&str; 2] = ["Object Created", "Object Deleted"];

/// The target id slate gives its queue on its rule.
pub const TARGET_ID: &str = "slate-queue";

/// EventBridge's endpoint: `AWS_ENDPOINT_URL_EVENTBRIDGE`, else `AWS_ENDPOINT_URL` (an
/// emulator serving every service), else AWS's for the region.
pub fn endpoint(region: &str) -> String {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    env("AWS_ENDPOINT_URL_EVENTBRIDGE")
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .map(|e| format!("{}/", e.trim_end_matches('/')))
        .unwrap_or_else(|| format!("https://events.{region}.amazonaws.com/"))
}

/// The name of slate's rule for `bucket` → `queue`: `slate-BUCKET-QUEUE`, shortened with a
/// hash past EventBridge's 64 characters (names are `[.-_A-Za-z0-9]`; a bucket's dots and
/// dashes are).
pub fn rule_name(bucket: &str, queue: &str) -> String {
    let full = format!("slate-{bucket}-{queue}");
    if full.len() <= 64 {
        return full;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, full.as_bytes());
    let hash: String = digest.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // 64 = "slate-" + 49 + "-" + 8
    let stem: String = format!("{bucket}-{queue}").chars().take(49).collect();
    format!("slate-{stem}-{hash}")
}

/// The key prefix a pair's rule filters on: the pair's prefix as a folder, or none.
fn key_prefix(pair_prefix: &str) -> Option<String> {
    crate::events::wiring::filter_prefix(pair_prefix)
}

/// The key prefixes a pattern's `detail.object.key` admits: None for every key, Some of the
/// prefixes (an exact key admits only itself: not a prefix slate can rely on).
fn pattern_prefixes(pattern: &Value) -> Option<Vec<String>> {
    let keys = pattern.pointer("/detail/object/key")?;
    let list = keys.as_array().cloned().unwrap_or_default();
    Some(
        list.iter()
            .filter_map(|k| k.get("prefix").and_then(Value::as_str))
            .map(str::to_string)
            .collect(),
    )
}

/// Whether list `field` of a pattern admits `value` (a missing field admits every value).
fn admits(pattern: &Value, pointer: &str, value: &str) -> bool {
    match pattern.pointer(pointer) {
        None => true,
        Some(Value::Array(a)) => a.iter().any(|v| v.as_str() == Some(value)),
        Some(_) => false,
    }
}

/// What the rule's pattern `text` misses of `bucket`'s events under `pair_prefix`, one line
/// each: empty when it delivers all of slate's required events of the pair's keys.
pub fn pattern_problems(text: &str, bucket: &str, pair_prefix: &str) -> Vec<String> {
    let Ok(p) = serde_json::from_str::<Value>(text) else {
        return vec![format!("its event pattern is not JSON: {text}")];
    };
    let mut out = Vec::new();
    if !admits(&p, "/source", "aws.s3") {
        out.push("its event pattern does not admit source aws.s3".to_string());
    }
    for t in REQUIRED {
        if !admits(&p, "/detail-type", t) {
            out.push(format!(
                "its event pattern leaves out detail-type '{t}': those changes never reach the daemon"
            ));
        }
    }
    if !admits(&p, "/detail/bucket/name", bucket) {
        out.push(format!("its event pattern does not admit bucket {bucket}"));
    }
    if let Some(prefixes) = pattern_prefixes(&p) {
        let want = key_prefix(pair_prefix).unwrap_or_default();
        if !prefixes.iter().any(|x| want.starts_with(x.as_str())) {
            out.push(format!(
                "its event pattern admits keys under {} only, not the pair's '{want}'",
                if prefixes.is_empty() {
                    "exact names".to_string()
                } else {
                    prefixes
                        .iter()
                        .map(|x| format!("'{x}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ));
        }
    }
    out
}

/// The pattern slate's rule has for `bucket` under `pair_prefix`. When the rule has a
/// pattern already (another pair of the bucket on the same queue), the key prefixes it
/// admits are kept beside the pair's: one rule serves both.
pub fn pattern(bucket: &str, pair_prefix: &str, existing: Option<&str>) -> Value {
    let mut p = json!({
        "source": ["aws.s3"],
        "detail-type": DETAIL_TYPES,
        "detail": {"bucket": {"name": [bucket]}},
    });
    let before = existing
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .filter(|e| admits(e, "/detail/bucket/name", bucket));
    let mut prefixes: Vec<String> = match key_prefix(pair_prefix) {
        None => Vec::new(),
        Some(x) => vec![x],
    };
    match before.as_ref().map(pattern_prefixes) {
        // the rule admitted every key: it still does
        Some(None) => prefixes.clear(),
        Some(Some(old)) if !prefixes.is_empty() => {
            for o in old {
                if !prefixes.contains(&o) {
                    prefixes.push(o);
                }
            }
        }
        _ => {}
    }
    // a prefix another admits already is left out
    let all = prefixes.clone();
    prefixes.retain(|x| !all.iter().any(|y| y != x && x.starts_with(y.as_str())));
    prefixes.sort();
    if !prefixes.is_empty() {
        p["detail"]["object"] = json!({
            "key": prefixes.iter().map(|x| json!({"prefix": x})).collect::<Vec<_>>()
        });
    }
    p
}

/// A rule as `DescribeRule` answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub arn: String,
    pub pattern: Option<String>,
    pub enabled: bool,
}

/// EventBridge through one bucket's credentials.
pub struct EventBridge<'a> {
    s3: &'a S3CrossBucket,
    endpoint: String,
}

/// The `__type` of an error answer, without its namespace.
fn error_type(v: &Value) -> String {
    v["__type"]
        .as_str()
        .unwrap_or_default()
        .rsplit('#')
        .next()
        .unwrap_or_default()
        .to_string()
}

impl<'a> EventBridge<'a> {
    pub fn new(s3: &'a S3CrossBucket) -> EventBridge<'a> {
        EventBridge {
            endpoint: endpoint(s3.region()),
            s3,
        }
    }

    /// One call: the status and the answer's JSON.
    async fn call(&self, action: &str, body: Value) -> Result<(u16, Value), String> {
        let (status, answer) = self
            .s3
            .aws_json(
                "events",
                &self.endpoint,
                &format!("AWSEvents.{action}"),
                &body,
            )
            .await?;
        let v = serde_json::from_slice(&answer).unwrap_or(Value::Null);
        Ok((status.as_u16(), v))
    }

    fn error(action: &str, status: u16, v: &Value) -> String {
        let message = crate::core::error::first_line(
            v["message"]
                .as_str()
                .or_else(|| v["Message"].as_str())
                .unwrap_or_default(),
        );
        let hint = if matches!(status, 400 | 403) && error_type(v).contains("AccessDenied") {
            " (needs events:DescribeRule, events:PutRule, events:ListTargetsByRule, events:PutTargets)"
        } else {
            ""
        };
        format!(
            "{action} answered {status} {} {message}{hint}",
            error_type(v)
        )
        .trim_end()
        .to_string()
    }

    /// The rule, None when there is none.
    pub async fn rule(&self, name: &str) -> Result<Option<Rule>, String> {
        match self.call("DescribeRule", json!({"Name": name})).await? {
            (200, v) => Ok(Some(Rule {
                arn: v["Arn"].as_str().unwrap_or_default().to_string(),
                pattern: v["EventPattern"].as_str().map(str::to_string),
                enabled: v["State"].as_str() != Some("DISABLED"),
            })),
            (_, v) if error_type(&v) == "ResourceNotFoundException" => Ok(None),
            (s, v) => Err(Self::error("DescribeRule", s, &v)),
        }
    }

    /// Makes or replaces the rule, enabled; its ARN.
    pub async fn put_rule(&self, name: &str, pattern: &Value) -> Result<String, String> {
        let body = json!({
            "Name": name,
            "EventPattern": pattern.to_string(),
            "State": "ENABLED",
            "Description": "slate: this bucket's changes to slate's queue (slate events setup)",
        });
        match self.call("PutRule", body).await? {
            (200, v) => Ok(v["RuleArn"].as_str().unwrap_or_default().to_string()),
            (s, v) => Err(Self::error("PutRule", s, &v)),
        }
    }

    /// The ARNs of the rule's targets.
    pub async fn targets(&self, rule: &str) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut body = json!({"Rule": rule});
            if let Some(t) = &token {
                body["NextToken"] = json!(t);
            }
            let v = match self.call("ListTargetsByRule", body).await? {
                (200, v) => v,
                (s, v) => return Err(Self::error("ListTargetsByRule", s, &v)),
            };
            if let Some(ts) = v["Targets"].as_array() {
                out.extend(
                    ts.iter()
                        .filter_map(|t| t["Arn"].as_str())
                        .map(str::to_string),
                );
            }
            match v["NextToken"].as_str().filter(|t| !t.is_empty()) {
                Some(t) => token = Some(t.to_string()),
                None => return Ok(out),
            }
        }
    }

    /// Adds the queue as the rule's target [`TARGET_ID`].
    pub async fn put_target(&self, rule: &str, queue_arn: &str) -> Result<(), String> {
        let body = json!({"Rule": rule, "Targets": [{"Id": TARGET_ID, "Arn": queue_arn}]});
        match self.call("PutTargets", body).await? {
            (200, v) if v["FailedEntryCount"].as_u64().unwrap_or(0) == 0 => Ok(()),
            (200, v) => Err(format!(
                "PutTargets: {}",
                v["FailedEntries"][0]["ErrorMessage"]
                    .as_str()
                    .unwrap_or("the target was refused")
            )),
            (s, v) => Err(Self::error("PutTargets", s, &v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_names_fit_eventbridges_limit() {
        assert_eq!(rule_name("media", "slate-q"), "slate-media-slate-q");
        let long = rule_name(&"b".repeat(63), &"q".repeat(80));
        assert_eq!(long.len(), 64, "{long}");
        assert!(long.starts_with("slate-bbbb"));
        // two long names that share their start differ
        assert_ne!(
            long,
            rule_name(&"b".repeat(63), &format!("{}x", "q".repeat(79)))
        );
        assert!(long
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')));
    }

    #[test]
    fn patterns_filter_bucket_types_and_prefix_and_keep_other_prefixes() {
        let p = pattern("b", "data", None);
        assert_eq!(
            p,
            json!({"source": ["aws.s3"],
                   "detail-type": ["Object Created", "Object Deleted", "Object Tags Added", "Object Tags Deleted"],
                   "detail": {"bucket": {"name": ["b"]}, "object": {"key": [{"prefix": "data/"}]}}})
        );
        assert!(pattern_problems(&p.to_string(), "b", "data").is_empty());
        assert!(pattern_problems(&p.to_string(), "b", "data/sub").is_empty());
        // the whole bucket: no key filter
        let all = pattern("b", "", None);
        assert!(all["detail"].get("object").is_none(), "{all}");
        // another pair's prefix on the same rule is kept
        let both = pattern("b", "logs", Some(&p.to_string()));
        assert_eq!(
            both["detail"]["object"]["key"],
            json!([{"prefix": "data/"}, {"prefix": "logs/"}])
        );
        assert!(pattern_problems(&both.to_string(), "b", "data").is_empty());
        assert!(pattern_problems(&both.to_string(), "b", "logs").is_empty());
        // a rule that admits every key still does
        assert!(pattern("b", "data", Some(&all.to_string()))["detail"]
            .get("object")
            .is_none());
        // a sub-prefix of one admitted is not added
        assert_eq!(
            pattern("b", "data/x", Some(&p.to_string()))["detail"]["object"]["key"],
            json!([{"prefix": "data/"}])
        );
        // the whole bucket on a rule for data/: no filter
        assert!(pattern("b", "", Some(&p.to_string()))["detail"]
            .get("object")
            .is_none());
        // a rule of another bucket's is not merged
        assert_eq!(
            pattern("b", "data", Some(&pattern("c", "logs", None).to_string())),
            p
        );
    }

    #[test]
    fn pattern_problems_name_what_is_missing() {
        let cases: [(Value, &str, &str); 6] = [
            (
                json!({"source": ["aws.s3"], "detail-type": ["Object Created"], "detail": {"bucket": {"name": ["b"]}}}),
                "data",
                "leaves out detail-type 'Object Deleted'",
            ),
            (
                json!({"source": ["aws.ec2"]}),
                "data",
                "does not admit source aws.s3",
            ),
            (
                json!({"source": ["aws.s3"], "detail": {"bucket": {"name": ["other"]}}}),
                "data",
                "does not admit bucket b",
            ),
            (
                json!({"source": ["aws.s3"], "detail": {"object": {"key": [{"prefix": "logs/"}]}}}),
                "data",
                "admits keys under 'logs/' only, not the pair's 'data/'",
            ),
            (
                json!({"source": ["aws.s3"], "detail": {"object": {"key": [{"prefix": "data/"}]}}}),
                "",
                "not the pair's ''",
            ),
            (
                json!({"source": ["aws.s3"], "detail": {"object": {"key": ["data/a"]}}}),
                "data",
                "exact names",
            ),
        ];
        for (p, prefix, want) in cases {
            let got = pattern_problems(&p.to_string(), "b", prefix);
            assert!(got.iter().any(|l| l.contains(want)), "{p}: {got:?}");
        }
        // no filter at all delivers everything
        assert!(pattern_problems("{}", "b", "data").is_empty());
        assert!(pattern_problems("not json", "b", "data")[0].contains("not JSON"));
    }
}
