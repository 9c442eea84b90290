//! The wiring a source needs to deliver its events, as pure functions: what S3's notification
//! configuration and an SQS queue policy must say for a pair's bucket and prefix, how slate's
//! entry is merged into a configuration that other consumers share, and what a configuration
//! read back is missing. `slate events setup` and `slate events check` (`cli/events.rs`) do
//! the I/O around these.
//!
//! S3 keeps one notification configuration per bucket and a PUT replaces it whole, so setup
//! reads it, keeps every entry that is not slate's (queues, topics, Lambda functions,
//! EventBridge), and refuses — naming the entry — when one of them overlaps slate's (S3 itself
//! refuses two rules that share an event type over overlapping prefixes and suffixes).

use serde_json::{json, Value};

/// The event types slate follows: what `events::s3` turns into upserts and deletes.
pub const S3_EVENTS: [&str; 4] = [
    "s3:ObjectCreated:*",
    "s3:ObjectRemoved:*",
    "s3:LifecycleExpiration:*",
    "s3:ObjectTagging:*",
];

/// Without these no change reaches the daemon; the others (expiry, tags) only some.
const S3_REQUIRED: [&str; 2] = ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"];

/// The `<Id>` of the entry slate writes.
pub const SLATE_ID_PREFIX: &str = "slate-";

/// What an entry of a notification configuration sends its events to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Queue(String),
    Topic(String),
    Lambda(String),
}

impl Target {
    pub fn arn(&self) -> &str {
        match self {
            Target::Queue(a) | Target::Topic(a) | Target::Lambda(a) => a,
        }
    }

    fn element(&self) -> (&'static str, &'static str) {
        match self {
            Target::Queue(_) => ("QueueConfiguration", "Queue"),
            Target::Topic(_) => ("TopicConfiguration", "Topic"),
            Target::Lambda(_) => ("CloudFunctionConfiguration", "CloudFunction"),
        }
    }

    pub fn what(&self) -> &'static str {
        match self {
            Target::Queue(_) => "queue",
            Target::Topic(_) => "topic",
            Target::Lambda(_) => "Lambda function",
        }
    }
}

/// One entry of a bucket's notification configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: Option<String>,
    pub target: Target,
    pub events: Vec<String>,
    pub prefix: Option<String>,
    pub suffix: Option<String>,
}

impl Entry {
    /// How the entry is named in a message: its id and target.
    pub fn describe(&self) -> String {
        let filter = match (&self.prefix, &self.suffix) {
            (None, None) => String::new(),
            (p, s) => format!(
                " on {}{}",
                p.as_deref()
                    .map(|p| format!("prefix '{p}'"))
                    .unwrap_or_default(),
                s.as_deref()
                    .map(|s| format!(" suffix '{s}'"))
                    .unwrap_or_default()
            ),
        };
        format!(
            "entry '{}' ({} {}: {}{filter})",
            self.id.as_deref().unwrap_or("(no id)"),
            self.target.what(),
            self.target.arn(),
            self.events.join(", ")
        )
    }
}

/// A bucket's notification configuration (`GET ?notification`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct S3Notification {
    pub entries: Vec<Entry>,
    /// `<EventBridgeConfiguration/>`: every event also goes to EventBridge.
    pub event_bridge: bool,
}

/// Parses the XML S3 answers to `GET /BUCKET?notification`.
pub fn parse_notification(xml: &str) -> Result<S3Notification, String> {
    #[derive(serde::Deserialize, Default)]
    struct Raw {
        #[serde(rename = "QueueConfiguration", default)]
        queues: Vec<RawEntry>,
        #[serde(rename = "TopicConfiguration", default)]
        topics: Vec<RawEntry>,
        #[serde(rename = "CloudFunctionConfiguration", default)]
        lambdas: Vec<RawEntry>,
        #[serde(rename = "EventBridgeConfiguration", default)]
        event_bridge: Option<serde::de::IgnoredAny>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct RawEntry {
        id: Option<String>,
        queue: Option<String>,
        topic: Option<String>,
        cloud_function: Option<String>,
        #[serde(default)]
        event: Vec<String>,
        filter: Option<RawFilter>,
    }
    #[derive(serde::Deserialize)]
    struct RawFilter {
        #[serde(rename = "S3Key")]
        key: Option<RawKey>,
    }
    #[derive(serde::Deserialize)]
    struct RawKey {
        #[serde(rename = "FilterRule", default)]
        rules: Vec<RawRule>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct RawRule {
        name: String,
        #[serde(default)]
        value: String,
    }
    if xml.trim().is_empty() {
        return Ok(S3Notification::default());
    }
    let raw: Raw =
        quick_xml::de::from_str(xml).map_err(|e| format!("notification configuration: {e}"))?;
    let mut out = S3Notification {
        entries: Vec::new(),
        event_bridge: raw.event_bridge.is_some(),
    };
    let all = raw
        .queues
        .into_iter()
        .map(|e| (e.queue.clone().map(Target::Queue), e))
        .chain(
            raw.topics
                .into_iter()
                .map(|e| (e.topic.clone().map(Target::Topic), e)),
        )
        .chain(
            raw.lambdas
                .into_iter()
                .map(|e| (e.cloud_function.clone().map(Target::Lambda), e)),
        );
    for (target, e) in all {
        let target = target.ok_or_else(|| {
            format!(
                "notification configuration: entry '{}' names no target",
                e.id.as_deref().unwrap_or("(no id)")
            )
        })?;
        let (mut prefix, mut suffix) = (None, None);
        for r in e
            .filter
            .and_then(|f| f.key)
            .map(|k| k.rules)
            .unwrap_or_default()
        {
            match r.name.to_ascii_lowercase().as_str() {
                "prefix" => prefix = Some(r.value),
                "suffix" => suffix = Some(r.value),
                other => return Err(format!("notification configuration: filter rule '{other}'")),
            }
        }
        out.entries.push(Entry {
            id: e.id,
            target,
            events: e.event,
            prefix: prefix.filter(|p| !p.is_empty()),
            suffix: suffix.filter(|s| !s.is_empty()),
        });
    }
    Ok(out)
}

fn esc(s: &str) -> String {
    quick_xml::escape::escape(s).to_string()
}

/// The XML of `PUT /BUCKET?notification`: every entry, in order (queues, topics, functions,
/// as S3 lists them), and EventBridge when it was on.
pub fn render_notification(n: &S3Notification) -> String {
    let mut out = String::from(
        "<NotificationConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">",
    );
    for kind in [
        "QueueConfiguration",
        "TopicConfiguration",
        "CloudFunctionConfiguration",
    ] {
        for e in n.entries.iter().filter(|e| e.target.element().0 == kind) {
            let (outer, inner) = e.target.element();
            out.push_str(&format!("<{outer}>"));
            if let Some(id) = &e.id {
                out.push_str(&format!("<Id>{}</Id>", esc(id)));
            }
            out.push_str(&format!("<{inner}>{}</{inner}>", esc(e.target.arn())));
            for ev in &e.events {
                out.push_str(&format!("<Event>{}</Event>", esc(ev)));
            }
            if e.prefix.is_some() || e.suffix.is_some() {
                out.push_str("<Filter><S3Key>");
                for (name, v) in [("prefix", &e.prefix), ("suffix", &e.suffix)] {
                    if let Some(v) = v {
                        out.push_str(&format!(
                            "<FilterRule><Name>{name}</Name><Value>{}</Value></FilterRule>",
                            esc(v)
                        ));
                    }
                }
                out.push_str("</S3Key></Filter>");
            }
            out.push_str(&format!("</{outer}>"));
        }
    }
    if n.event_bridge {
        out.push_str("<EventBridgeConfiguration></EventBridgeConfiguration>");
    }
    out.push_str("</NotificationConfiguration>");
    out
}

/// Whether event type `a` and `b` name a common event (`s3:ObjectCreated:*` covers
/// `s3:ObjectCreated:Put`).
fn events_meet(a: &str, b: &str) -> bool {
    let stem = |e: &str| e.strip_suffix('*').map(str::to_string);
    match (stem(a), stem(b)) {
        (Some(x), Some(y)) => x.starts_with(&y) || y.starts_with(&x),
        (Some(x), None) => b.starts_with(&x),
        (None, Some(y)) => a.starts_with(&y),
        (None, None) => a == b,
    }
}

/// Whether event type `have` delivers every event of `want`.
fn event_covers(have: &str, want: &str) -> bool {
    match have.strip_suffix('*') {
        Some(stem) => want.starts_with(stem),
        None => have == want,
    }
}

/// S3's overlap rule: two entries overlap when they share an event type and a key could
/// match both filters (one prefix starts the other, one suffix ends the other).
pub fn overlaps(a: &Entry, b: &Entry) -> bool {
    let share = a
        .events
        .iter()
        .any(|x| b.events.iter().any(|y| events_meet(x, y)));
    let pre = match (&a.prefix, &b.prefix) {
        (Some(x), Some(y)) => x.starts_with(y.as_str()) || y.starts_with(x.as_str()),
        _ => true,
    };
    let suf = match (&a.suffix, &b.suffix) {
        (Some(x), Some(y)) => x.ends_with(y.as_str()) || y.ends_with(x.as_str()),
        _ => true,
    };
    share && pre && suf
}

/// The filter prefix of a pair's key prefix: `data` follows `data/…`.
pub fn filter_prefix(pair_prefix: &str) -> Option<String> {
    let p = pair_prefix.trim_matches('/');
    (!p.is_empty()).then(|| format!("{p}/"))
}

/// The entry slate wants: its events to `target` (a queue, or a topic of a fan-out), filtered
/// to the pair's prefix.
pub fn slate_entry(pair_prefix: &str, target: Target) -> Entry {
    let arn = target.arn();
    let name = arn.rsplit(':').next().unwrap_or(arn);
    // S3 wants the ids of one configuration unique: two pairs' entries for one queue differ
    // by their prefix
    let prefix = filter_prefix(pair_prefix);
    let id = match &prefix {
        None => format!("{SLATE_ID_PREFIX}{name}"),
        Some(p) => {
            let h = p.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            format!("{SLATE_ID_PREFIX}{name}-{:08x}", h as u32)
        }
    };
    Entry {
        id: Some(id),
        target,
        events: S3_EVENTS.iter().map(|s| s.to_string()).collect(),
        prefix,
        suffix: None,
    }
}

/// What setup is to do with a bucket's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// slate's entry is there as wanted: nothing to write.
    Unchanged,
    /// Write this configuration; the changes say what differs.
    Write(S3Notification, Vec<Change>),
    /// Entries of others overlap slate's: nothing is written, each is named.
    Conflict(Vec<String>),
}

/// One change [`merge`] makes to a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Added(Entry),
    Replaced(Entry),
    /// Entries of others, kept as they are.
    Kept(usize),
}

impl Change {
    /// The change as a line: as done, or (`planned`) as a dry run would do it.
    pub fn line(&self, planned: bool) -> String {
        let (verb, what) = match self {
            Change::Added(e) => (["added", "would add"], e.describe()),
            Change::Replaced(e) => (["replaced", "would replace"], e.describe()),
            Change::Kept(n) => (
                ["kept", "would keep"],
                format!("{n} other entr{}", if *n == 1 { "y" } else { "ies" }),
            ),
        };
        format!("{} {what}", verb[planned as usize])
    }
}

/// Merges `want` into `current`: entries for the same queue (slate's, from an earlier
/// setup, or one made by hand) are replaced by `want`; every other entry is kept as it is.
pub fn merge(current: &S3Notification, want: &Entry) -> Merge {
    let ours = |e: &Entry| e.target == want.target;
    if current.entries.iter().any(|e| ours(e) && covers(e, want)) {
        return Merge::Unchanged;
    }
    let conflicts: Vec<String> = current
        .entries
        .iter()
        .filter(|e| !ours(e) && overlaps(e, want))
        .map(|e| {
            format!(
                "{} overlaps slate's (events {} on {}): S3 refuses two such rules; send both \
                 through one SNS topic (`--fanout sns://TOPIC`, a queue per consumer) or narrow \
                 that entry",
                e.describe(),
                want.events.join(", "),
                want.prefix
                    .as_deref()
                    .map(|p| format!("prefix '{p}'"))
                    .unwrap_or_else(|| "the whole bucket".into())
            )
        })
        .collect();
    if !conflicts.is_empty() {
        return Merge::Conflict(conflicts);
    }
    // An entry of the same target that overlaps slate's is folded into the new one, which
    // covers both (a shorter prefix, every event of either): two pairs of one bucket may share
    // a queue or topic. One that does not overlap (another pair's prefix) stays beside it.
    let mut lines = Vec::new();
    let mut next = S3Notification {
        entries: Vec::new(),
        event_bridge: current.event_bridge,
    };
    let mut new = want.clone();
    for e in &current.entries {
        if ours(e) && overlaps(e, want) {
            lines.push(Change::Replaced(e.clone()));
            new = widen(&new, e);
        } else {
            next.entries.push(e.clone());
        }
    }
    // the folded entry covers more than slate's: it must not meet anyone's either (S3 would
    // refuse the whole configuration after the queue and policies were changed)
    let clashes: Vec<String> = next
        .entries
        .iter()
        .filter(|e| overlaps(e, &new))
        .map(|e| {
            format!(
                "{} overlaps {} (slate's entry folded with its earlier ones for the same \
                 target): S3 refuses two such rules; narrow one of them",
                e.describe(),
                new.describe()
            )
        })
        .collect();
    if !clashes.is_empty() {
        return Merge::Conflict(clashes);
    }
    let kept = next.entries.len();
    next.entries.push(new.clone());
    lines.push(Change::Added(new));
    if kept > 0 {
        lines.push(Change::Kept(kept));
    }
    Merge::Write(next, lines)
}

/// Whether entry `have` sends every event `want` asks for, of every key `want` covers.
pub fn covers(have: &Entry, want: &Entry) -> bool {
    let prefix = match (&have.prefix, &want.prefix) {
        (None, _) => true,
        (Some(h), Some(w)) => w.starts_with(h.as_str()),
        (Some(_), None) => false,
    };
    let suffix = match (&have.suffix, &want.suffix) {
        (None, _) => true,
        (Some(h), Some(w)) => w.ends_with(h.as_str()),
        (Some(_), None) => false,
    };
    prefix
        && suffix
        && want
            .events
            .iter()
            .all(|w| have.events.iter().any(|h| event_covers(h, w)))
}

/// `a` widened to cover `b` too: the common prefix (and suffix), the events of either.
fn widen(a: &Entry, b: &Entry) -> Entry {
    fn common(x: &Option<String>, y: &Option<String>, from_end: bool) -> Option<String> {
        let (x, y) = (x.as_deref()?, y.as_deref()?);
        let n = if from_end {
            x.chars()
                .rev()
                .zip(y.chars().rev())
                .take_while(|(p, q)| p == q)
                .count()
        } else {
            x.chars().zip(y.chars()).take_while(|(p, q)| p == q).count()
        };
        let c: String = if from_end {
            let mut v: Vec<char> = x.chars().rev().take(n).collect();
            v.reverse();
            v.into_iter().collect()
        } else {
            x.chars().take(n).collect()
        };
        (!c.is_empty()).then_some(c)
    }
    let mut events = a.events.clone();
    for e in &b.events {
        if !events.iter().any(|h| event_covers(h, e)) {
            events.push(e.clone());
        }
    }
    Entry {
        id: a.id.clone(),
        target: a.target.clone(),
        events,
        prefix: common(&a.prefix, &b.prefix, false),
        suffix: common(&a.suffix, &b.suffix, true),
    }
}

/// One finding of `events check`: `broken` when events cannot reach the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub broken: bool,
    pub line: String,
}

impl Finding {
    fn broken(line: String) -> Finding {
        Finding { broken: true, line }
    }
    fn warn(line: String) -> Finding {
        Finding {
            broken: false,
            line,
        }
    }
}

/// What the bucket's configuration lacks for the pair at `pair_prefix` to reach `target` (the
/// daemon's queue, or the topic it is subscribed to).
pub fn check_notification(n: &S3Notification, pair_prefix: &str, target: &Target) -> Vec<Finding> {
    let (what, arn) = (target.what(), target.arn());
    let want = filter_prefix(pair_prefix);
    let ours: Vec<&Entry> = n.entries.iter().filter(|e| &e.target == target).collect();
    if ours.is_empty() {
        return vec![Finding::broken(format!(
            "the bucket's notification configuration has no entry for {what} {arn} \
             (it has {} other{}): run `slate events setup`",
            n.entries.len(),
            if n.entries.len() == 1 { "" } else { "s" }
        ))];
    }
    // entries that cover the pair's keys: no prefix, or one that starts the pair's
    let covering: Vec<&&Entry> = ours
        .iter()
        .filter(|e| match (&e.prefix, &want) {
            (None, _) => true,
            (Some(p), Some(w)) => w.starts_with(p.as_str()),
            (Some(_), None) => false,
        })
        .collect();
    let mut out = Vec::new();
    if covering.is_empty() {
        out.push(Finding::broken(format!(
            "{} filters on a prefix outside the pair's ({}): no event of the pair's keys is sent",
            ours[0].describe(),
            want.as_deref().unwrap_or("the whole bucket")
        )));
        return out;
    }
    for e in &covering {
        if e.suffix.is_some() {
            out.push(Finding::warn(format!(
                "{} filters on a suffix: changes of other keys wait for the drift check",
                e.describe()
            )));
        }
    }
    let has = |w: &str| {
        covering
            .iter()
            .any(|e| e.events.iter().any(|h| event_covers(h, w)))
    };
    for w in S3_EVENTS {
        if !has(w) {
            let line = format!("no entry for {what} {arn} sends {w}");
            out.push(if S3_REQUIRED.contains(&w) {
                Finding::broken(format!("{line}: those changes never reach the daemon"))
            } else {
                Finding::warn(format!("{line}: those changes wait for the drift check"))
            });
        }
    }
    out
}

/// What a resource policy (an SQS queue's, an SNS topic's) must let one AWS service do:
/// S3 send a bucket's events to a queue or a topic, SNS deliver a topic's messages to a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The calling service's principal: `s3.amazonaws.com`, `sns.amazonaws.com`.
    pub service: &'static str,
    /// `sqs:SendMessage`, `SNS:Publish`.
    pub action: &'static str,
    /// The queue's or topic's ARN.
    pub resource: String,
    /// Whose calls (`aws:SourceArn`): the bucket's or topic's ARN.
    pub source_arn: String,
    /// The statement's Sid: slate's statement for this source is replaced, not doubled.
    pub sid: String,
    /// "queue" or "topic", for messages.
    pub what: &'static str,
}

impl Grant {
    /// S3 may send `bucket`'s events to the queue `queue_arn`.
    pub fn s3_to_queue(bucket: &str, queue_arn: &str) -> Grant {
        Grant {
            service: "s3.amazonaws.com",
            action: "sqs:SendMessage",
            resource: queue_arn.to_string(),
            source_arn: format!("arn:aws:s3:::{bucket}"),
            sid: format!("slate-s3-{bucket}"),
            what: "queue",
        }
    }

    /// S3 may publish `bucket`'s events to the topic `topic_arn`.
    pub fn s3_to_topic(bucket: &str, topic_arn: &str) -> Grant {
        Grant {
            service: "s3.amazonaws.com",
            action: "SNS:Publish",
            resource: topic_arn.to_string(),
            source_arn: format!("arn:aws:s3:::{bucket}"),
            sid: format!("slate-s3-{bucket}"),
            what: "topic",
        }
    }

    /// SNS may deliver the topic's messages to the queue `queue_arn`.
    pub fn topic_to_queue(topic_arn: &str, queue_arn: &str) -> Grant {
        let topic = topic_arn.rsplit(':').next().unwrap_or(topic_arn);
        Grant {
            service: "sns.amazonaws.com",
            action: "sqs:SendMessage",
            resource: queue_arn.to_string(),
            source_arn: topic_arn.to_string(),
            sid: format!("slate-sns-{topic}"),
            what: "queue",
        }
    }

    /// EventBridge may deliver the rule `rule_arn`'s events to the queue `queue_arn`.
    pub fn rule_to_queue(rule_arn: &str, queue_arn: &str) -> Grant {
        let rule = rule_arn.rsplit('/').next().unwrap_or(rule_arn);
        Grant {
            service: "events.amazonaws.com",
            action: "sqs:SendMessage",
            resource: queue_arn.to_string(),
            source_arn: rule_arn.to_string(),
            sid: format!("slate-events-{rule}"),
            what: "queue",
        }
    }

    /// Who is let in, for messages: `bucket B`, `rule R` or `topic T`.
    pub fn who(&self) -> String {
        if let Some(r) = self
            .source_arn
            .strip_prefix("arn:aws:events:")
            .and_then(|r| r.split_once(":rule/"))
        {
            return format!("rule {}", r.1);
        }
        match self.source_arn.strip_prefix("arn:aws:s3:::") {
            Some(b) => format!("bucket {b}"),
            None => format!(
                "topic {}",
                self.source_arn
                    .rsplit(':')
                    .next()
                    .unwrap_or(&self.source_arn)
            ),
        }
    }

    /// The statement slate adds.
    pub fn statement(&self) -> Value {
        json!({
            "Sid": self.sid,
            "Effect": "Allow",
            "Principal": {"Service": self.service},
            "Action": self.action,
            "Resource": self.resource,
            "Condition": {"ArnLike": {"aws:SourceArn": self.source_arn}}
        })
    }

    /// Whether statement `s` applies to this call, as IAM evaluates it for what slate knows
    /// of the call: the service principal, the action, the resource, `aws:SourceArn` and
    /// `aws:SecureTransport` (AWS's services deliver over TLS). `Principal`, `Action` and
    /// `Resource` and their `Not…` forms are read; a condition on any other key (an account,
    /// an IP, a time), or an operator slate does not know, makes the answer [`Tri::Maybe`].
    fn applies(&self, s: &Value) -> Tri {
        let principal_in = |p: &Value| match p {
            Value::String(p) => p == "*",
            Value::Object(m) => {
                as_list(m.get("Service"))
                    .iter()
                    .any(|x| glob(x, self.service))
                    || as_list(m.get("AWS")).iter().any(|x| x == "*")
            }
            _ => false,
        };
        let principal = match (s.get("Principal"), s.get("NotPrincipal")) {
            (Some(p), _) => principal_in(p),
            (None, Some(np)) => !principal_in(np),
            (None, None) => false,
        };
        let action_in = |v: Option<&Value>| {
            as_list(v)
                .iter()
                .any(|a| glob(&a.to_ascii_lowercase(), &self.action.to_ascii_lowercase()))
        };
        let action = match (s.get("Action"), s.get("NotAction")) {
            (Some(_), _) => action_in(s.get("Action")),
            (None, Some(_)) => !action_in(s.get("NotAction")),
            (None, None) => false,
        };
        let resource_in = |v: Option<&Value>| as_list(v).iter().any(|r| glob(r, &self.resource));
        let resource = match (s.get("Resource"), s.get("NotResource")) {
            (Some(r), _) => as_list(Some(r)).is_empty() || resource_in(Some(r)),
            (None, Some(_)) => !resource_in(s.get("NotResource")),
            (None, None) => true,
        };
        if !(principal && action && resource) {
            return Tri::No;
        }
        let Some(c) = s.get("Condition") else {
            return Tri::Yes;
        };
        let Some(c) = c.as_object() else {
            return Tri::Maybe;
        };
        let mut all = Tri::Yes;
        for (op, kv) in c {
            let Some(kv) = kv.as_object() else {
                return Tri::Maybe;
            };
            for (k, v) in kv {
                all = all.and(self.condition(op, k, &as_list(Some(v))));
            }
        }
        all
    }

    /// One condition: `op` on key `key` against `vals`.
    fn condition(&self, op: &str, key: &str, vals: &[String]) -> Tri {
        let op = op
            .strip_prefix("ForAnyValue:")
            .or_else(|| op.strip_prefix("ForAllValues:"))
            .unwrap_or(op);
        // every key slate knows is present in the call, so `…IfExists` is the plain operator
        let op = op.strip_suffix("IfExists").unwrap_or(op);
        let known = match key.to_ascii_lowercase().as_str() {
            "aws:sourcearn" => self.source_arn.clone(),
            "aws:securetransport" => "true".to_string(),
            _ => return Tri::Maybe,
        };
        let x = known.as_str();
        let any = |f: &dyn Fn(&str) -> bool| vals.iter().any(|v| f(v));
        Tri::from(match op {
            "StringEquals" | "ArnEquals" => any(&|v| v == x),
            "StringNotEquals" | "ArnNotEquals" => !any(&|v| v == x),
            "StringEqualsIgnoreCase" => any(&|v| v.eq_ignore_ascii_case(x)),
            "StringNotEqualsIgnoreCase" => !any(&|v| v.eq_ignore_ascii_case(x)),
            "StringLike" | "ArnLike" => any(&|v| glob(v, x)),
            "StringNotLike" | "ArnNotLike" => !any(&|v| glob(v, x)),
            "Bool" => any(&|v| v.eq_ignore_ascii_case(x)),
            // the key is present: `Null: true` (absent) fails, `Null: false` holds
            "Null" => any(&|v| v.eq_ignore_ascii_case("false")),
            _ => return Tri::Maybe,
        })
    }
}

/// An answer that may be unknown: whether a statement applies to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tri {
    Yes,
    No,
    Maybe,
}

impl Tri {
    fn and(self, o: Tri) -> Tri {
        match (self, o) {
            (Tri::No, _) | (_, Tri::No) => Tri::No,
            (Tri::Maybe, _) | (_, Tri::Maybe) => Tri::Maybe,
            _ => Tri::Yes,
        }
    }
}

impl From<bool> for Tri {
    fn from(b: bool) -> Tri {
        if b {
            Tri::Yes
        } else {
            Tri::No
        }
    }
}

fn as_list(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// IAM's `*`/`?` wildcards, as ArnLike and Resource match: the greedy match that backs up
/// to the last `*` (time bounded by the product of the lengths, whatever the pattern).
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// Whether a resource's policy lets `g` happen: None when it does, else why not. An allow
/// whose conditions slate cannot evaluate is taken to hold; a deny is reported only when it
/// surely applies (see [`policy_doubts`] for one that may).
pub fn policy_refuses(policy: Option<&str>, g: &Grant) -> Option<String> {
    refuses(policy, g, true)
}

/// A deny of the policy that may apply to `g`, under a condition slate cannot evaluate (a
/// source account, an IP, a time): what `events check` warns of.
pub fn policy_doubts(policy: Option<&str>, g: &Grant) -> Option<String> {
    let statements = statements(policy?)?;
    let d = statements
        .iter()
        .find(|s| effect(s, "Deny") && g.applies(s) == Tri::Maybe)?;
    Some(format!(
        "the {}'s policy may deny {} {} ({}: a condition slate cannot evaluate)",
        g.what,
        g.who(),
        g.action,
        sid(d)
    ))
}

fn statements(text: &str) -> Option<Vec<Value>> {
    let v: Value = serde_json::from_str(text).ok()?;
    Some(match v.get("Statement") {
        Some(Value::Array(a)) => a.clone(),
        Some(o @ Value::Object(_)) => vec![o.clone()],
        _ => Vec::new(),
    })
}

fn sid(s: &Value) -> String {
    s.get("Sid")
        .and_then(Value::as_str)
        .map(|x| format!("statement '{x}'"))
        .unwrap_or_else(|| "a statement".into())
}

fn effect(s: &Value, e: &str) -> bool {
    s.get("Effect").and_then(Value::as_str) == Some(e)
}

/// `lenient_allow`: an allow that may apply counts (check), or does not (setup adds its own).
fn refuses(policy: Option<&str>, g: &Grant, lenient_allow: bool) -> Option<String> {
    let what = g.what;
    let Some(text) = policy.filter(|p| !p.trim().is_empty()) else {
        return Some(format!(
            "the {what} has no policy: {} may not send to it",
            g.who()
        ));
    };
    if let Err(e) = serde_json::from_str::<Value>(text) {
        return Some(format!("the {what}'s policy is no JSON ({e})"));
    }
    let statements = statements(text).unwrap_or_default();
    if let Some(d) = statements
        .iter()
        .find(|s| effect(s, "Deny") && g.applies(s) == Tri::Yes)
    {
        return Some(format!(
            "the {what}'s policy denies {} {} ({})",
            g.who(),
            g.action,
            sid(d)
        ));
    }
    let allows = |s: &Value| match g.applies(s) {
        Tri::Yes => true,
        Tri::Maybe => lenient_allow,
        Tri::No => false,
    };
    if statements.iter().any(|s| effect(s, "Allow") && allows(s)) {
        None
    } else {
        Some(format!(
            "the {what}'s policy has no statement that lets {} ({}) {}",
            g.who(),
            g.service,
            g.action
        ))
    }
}

/// The policy with slate's statement for `g` (an earlier one of slate's with the same Sid
/// replaced, every other statement kept); None when it already lets `g` happen. A policy
/// that denies it is not rewritten: that is someone's decision.
pub fn merge_policy(policy: Option<&str>, g: &Grant) -> Result<Option<String>, String> {
    match refuses(policy, g, false) {
        None => return Ok(None),
        Some(why) if why.contains(" denies ") => return Err(why),
        Some(_) => {}
    }
    let mut v: Value = match policy.filter(|p| !p.trim().is_empty()) {
        None => json!({"Version": "2012-10-17", "Statement": []}),
        Some(text) => {
            serde_json::from_str(text).map_err(|e| format!("the {}'s policy: {e}", g.what))?
        }
    };
    let obj = v
        .as_object_mut()
        .ok_or_else(|| format!("the {}'s policy is not a JSON object", g.what))?;
    let mut statements = match obj.remove("Statement") {
        Some(Value::Array(a)) => a,
        Some(o @ Value::Object(_)) => vec![o],
        _ => Vec::new(),
    };
    statements.retain(|s| s.get("Sid").and_then(Value::as_str) != Some(g.sid.as_str()));
    statements.push(g.statement());
    obj.insert("Statement".into(), Value::Array(statements));
    obj.entry("Version").or_insert_with(|| json!("2012-10-17"));
    Ok(Some(v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: &str = "arn:aws:sqs:us-east-1:123456789012:slate-q";

    fn g(bucket: &str) -> Grant {
        Grant::s3_to_queue(bucket, Q)
    }

    fn entry(target: Target, events: &[&str], prefix: Option<&str>, suffix: Option<&str>) -> Entry {
        Entry {
            id: Some("x".into()),
            target,
            events: events.iter().map(|s| s.to_string()).collect(),
            prefix: prefix.map(str::to_string),
            suffix: suffix.map(str::to_string),
        }
    }

    #[test]
    fn configurations_round_trip_with_every_kind_of_entry() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<NotificationConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
<QueueConfiguration><Id>other</Id><Queue>arn:aws:sqs:us-east-1:1:other</Queue>
<Event>s3:ObjectCreated:Put</Event><Filter><S3Key><FilterRule><Name>Prefix</Name><Value>logs/</Value></FilterRule>
<FilterRule><Name>Suffix</Name><Value>.gz</Value></FilterRule></S3Key></Filter></QueueConfiguration>
<TopicConfiguration><Id>t</Id><Topic>arn:aws:sns:us-east-1:1:t</Topic><Event>s3:ObjectRestore:*</Event></TopicConfiguration>
<CloudFunctionConfiguration><Id>f &amp; g</Id><CloudFunction>arn:aws:lambda:us-east-1:1:function:f</CloudFunction>
<Event>s3:ObjectCreated:*</Event><Filter><S3Key><FilterRule><Name>prefix</Name><Value>in/</Value></FilterRule></S3Key></Filter></CloudFunctionConfiguration>
<EventBridgeConfiguration/></NotificationConfiguration>"#;
        let n = parse_notification(xml).unwrap();
        assert_eq!(n.entries.len(), 3);
        assert!(n.event_bridge);
        assert_eq!(n.entries[0].prefix.as_deref(), Some("logs/"));
        assert_eq!(n.entries[0].suffix.as_deref(), Some(".gz"));
        assert_eq!(n.entries[2].id.as_deref(), Some("f & g"));
        assert_eq!(
            n.entries[2].target,
            Target::Lambda("arn:aws:lambda:us-east-1:1:function:f".into())
        );
        let again = parse_notification(&render_notification(&n)).unwrap();
        assert_eq!(again, n);
        assert_eq!(parse_notification("").unwrap(), S3Notification::default());
        assert_eq!(
            parse_notification("<NotificationConfiguration/>").unwrap(),
            S3Notification::default()
        );
        assert!(parse_notification("<NotificationConfiguration><QueueConfiguration><Id>a</Id></QueueConfiguration></NotificationConfiguration>")
            .unwrap_err()
            .contains("'a' names no target"));
    }

    #[test]
    fn overlaps_follow_s3s_rule() {
        let q = || Target::Queue("arn:q".into());
        let cases = [
            // (events a, prefix a, suffix a, events b, prefix b, suffix b, overlap)
            (
                &["s3:ObjectCreated:*"][..],
                None,
                None,
                &["s3:ObjectCreated:Put"][..],
                None,
                None,
                true,
            ),
            (
                &["s3:ObjectCreated:*"],
                None,
                None,
                &["s3:ObjectRemoved:*"],
                None,
                None,
                false,
            ),
            (
                &["s3:ObjectCreated:*"],
                Some("a/"),
                None,
                &["s3:ObjectCreated:*"],
                Some("b/"),
                None,
                false,
            ),
            (
                &["s3:ObjectCreated:*"],
                Some("a/"),
                None,
                &["s3:ObjectCreated:*"],
                Some("a/b/"),
                None,
                true,
            ),
            (
                &["s3:ObjectCreated:*"],
                Some("a/"),
                None,
                &["s3:ObjectCreated:*"],
                None,
                Some(".gz"),
                true,
            ),
            (
                &["s3:ObjectCreated:*"],
                None,
                Some(".gz"),
                &["s3:ObjectCreated:*"],
                None,
                Some(".jpg"),
                false,
            ),
            (
                &["s3:ObjectCreated:*"],
                None,
                Some("x.gz"),
                &["s3:ObjectCreated:*"],
                None,
                Some(".gz"),
                true,
            ),
            (
                &["s3:ObjectRemoved:Delete"],
                None,
                None,
                &["s3:ObjectRemoved:DeleteMarkerCreated"],
                None,
                None,
                false,
            ),
        ];
        for (ea, pa, sa, eb, pb, sb, want) in cases {
            let a = entry(q(), ea, pa, sa);
            let b = entry(q(), eb, pb, sb);
            assert_eq!(overlaps(&a, &b), want, "{a:?} / {b:?}");
            assert_eq!(overlaps(&b, &a), want, "symmetric: {a:?} / {b:?}");
        }
    }

    #[test]
    fn merge_keeps_others_replaces_ours_and_refuses_overlaps() {
        let want = slate_entry("data", Target::Queue(Q.into()));
        assert_eq!(want.prefix.as_deref(), Some("data/"));
        assert!(
            want.id
                .as_deref()
                .is_some_and(|i| i.starts_with("slate-slate-q-")),
            "{want:?}"
        );
        assert_ne!(
            slate_entry("other", Target::Queue(Q.into())).id,
            want.id,
            "two prefixes on one queue: two ids"
        );
        assert_eq!(
            slate_entry("", Target::Queue(Q.into())).id.as_deref(),
            Some("slate-slate-q")
        );
        let other_q = entry(
            Target::Queue("arn:other".into()),
            &["s3:ObjectCreated:*"],
            Some("logs/"),
            None,
        );
        let lambda = entry(
            Target::Lambda("arn:f".into()),
            &["s3:ObjectCreated:Put"],
            Some("in/"),
            Some(".jpg"),
        );
        let current = S3Notification {
            entries: vec![other_q.clone(), lambda.clone()],
            event_bridge: true,
        };
        let Merge::Write(next, lines) = merge(&current, &want) else {
            panic!("expected a write")
        };
        assert_eq!(
            next.entries,
            vec![other_q.clone(), lambda.clone(), want.clone()]
        );
        assert!(next.event_bridge, "EventBridge stays on");
        assert_eq!(lines, vec![Change::Added(want.clone()), Change::Kept(2)]);
        assert_eq!(lines[1].line(false), "kept 2 other entries");
        assert_eq!(lines[1].line(true), "would keep 2 other entries");
        assert!(lines[0]
            .line(true)
            .starts_with("would add entry 'slate-slate-q-"));
        // the same again changes nothing
        assert_eq!(merge(&next, &want), Merge::Unchanged);
        // another pair's entry for our queue (a prefix apart) stays beside slate's new one
        let beside = entry(
            Target::Queue(Q.into()),
            &["s3:ObjectCreated:*"],
            Some("old/"),
            None,
        );
        let Merge::Write(n2, lines) = merge(
            &S3Notification {
                entries: vec![beside.clone(), other_q.clone()],
                event_bridge: false,
            },
            &want,
        ) else {
            panic!("expected a write")
        };
        assert_eq!(
            n2.entries,
            vec![beside.clone(), other_q.clone(), want.clone()]
        );
        assert_eq!(lines[0], Change::Added(want.clone()));
        // one for our queue that overlaps (a wider prefix, fewer events) is folded into one
        // entry covering both
        let wider = entry(
            Target::Queue(Q.into()),
            &["s3:ObjectCreated:Put"],
            Some("dat"),
            None,
        );
        let Merge::Write(n3, lines) = merge(
            &S3Notification {
                entries: vec![wider.clone()],
                event_bridge: false,
            },
            &want,
        ) else {
            panic!("expected a write")
        };
        assert_eq!(n3.entries.len(), 1);
        assert_eq!(n3.entries[0].prefix.as_deref(), Some("dat"));
        assert_eq!(n3.entries[0].events, want.events);
        assert!(
            lines[0].line(false).starts_with("replaced entry 'x'"),
            "{lines:?}"
        );
        assert_eq!(merge(&n3, &want), Merge::Unchanged);
        // ... and a narrower one of ours is replaced by slate's wider entry
        let narrow = entry(
            Target::Queue(Q.into()),
            &["s3:ObjectRemoved:*"],
            Some("data/sub/"),
            Some(".bin"),
        );
        let Merge::Write(n4, _) = merge(
            &S3Notification {
                entries: vec![narrow],
                event_bridge: false,
            },
            &want,
        ) else {
            panic!("expected a write")
        };
        assert_eq!(n4.entries, vec![want.clone()]);
        // folding ours must not make slate's entry meet someone else's
        let ours_wide = entry(
            Target::Queue(Q.into()),
            &["s3:ObjectCreated:*"],
            Some("a/"),
            None,
        );
        let theirs_deeper = entry(
            Target::Queue("arn:theirs".into()),
            &["s3:ObjectRemoved:*"],
            Some("a/c/"),
            None,
        );
        match merge(
            &S3Notification {
                entries: vec![ours_wide, theirs_deeper],
                event_bridge: false,
            },
            &slate_entry("a/b", Target::Queue(Q.into())),
        ) {
            Merge::Conflict(lines) => assert!(lines[0].contains("arn:theirs"), "{lines:?}"),
            other => panic!("expected a conflict: {other:?}"),
        }
        // an overlapping rule of someone else's is named, not overwritten
        let clash = entry(
            Target::Queue("arn:theirs".into()),
            &["s3:ObjectRemoved:*"],
            Some("da"),
            None,
        );
        match merge(
            &S3Notification {
                entries: vec![clash],
                event_bridge: false,
            },
            &want,
        ) {
            Merge::Conflict(lines) => {
                assert_eq!(lines.len(), 1);
                assert!(
                    lines[0].contains("arn:theirs") && lines[0].contains("sns://"),
                    "{}",
                    lines[0]
                );
            }
            other => panic!("expected a conflict: {other:?}"),
        }
    }

    #[test]
    fn check_names_what_cannot_deliver() {
        let ok = S3Notification {
            entries: vec![slate_entry("data", Target::Queue(Q.into()))],
            event_bridge: false,
        };
        assert_eq!(
            check_notification(&ok, "data", &Target::Queue(Q.into())),
            vec![]
        );
        // a whole-bucket entry covers the pair too
        let whole = S3Notification {
            entries: vec![slate_entry("", Target::Queue(Q.into()))],
            event_bridge: false,
        };
        assert_eq!(
            check_notification(&whole, "data/sub", &Target::Queue(Q.into())),
            vec![]
        );
        let cases: [(Vec<Entry>, &str, bool); 5] = [
            (vec![], "no entry for queue", true),
            (
                vec![entry(
                    Target::Queue(Q.into()),
                    &S3_EVENTS,
                    Some("other/"),
                    None,
                )],
                "outside the pair's",
                true,
            ),
            (
                vec![entry(
                    Target::Queue(Q.into()),
                    &[
                        "s3:ObjectCreated:*",
                        "s3:LifecycleExpiration:*",
                        "s3:ObjectTagging:*",
                    ],
                    None,
                    None,
                )],
                "sends s3:ObjectRemoved:*: those changes never reach",
                true,
            ),
            (
                vec![entry(Target::Queue(Q.into()), &S3_REQUIRED, None, None)],
                "sends s3:LifecycleExpiration:*: those changes wait",
                false,
            ),
            (
                vec![entry(
                    Target::Queue(Q.into()),
                    &S3_EVENTS,
                    None,
                    Some(".bin"),
                )],
                "filters on a suffix",
                false,
            ),
        ];
        for (entries, want, broken) in cases {
            let n = S3Notification {
                entries,
                event_bridge: false,
            };
            let f = check_notification(&n, "data", &Target::Queue(Q.into()));
            let hit = f.iter().find(|f| f.line.contains(want));
            assert!(hit.is_some(), "{want}: {f:?}");
            assert_eq!(hit.map(|f| f.broken), Some(broken), "{want}: {f:?}");
            assert_eq!(f.iter().any(|f| f.broken), broken, "{want}: {f:?}");
        }
    }

    #[test]
    fn wildcards_match_as_iam_does() {
        let cases = [
            ("*", "", true),
            ("arn:aws:s3:::b*", "arn:aws:s3:::bkt", true),
            ("arn:aws:s3:::b*", "arn:aws:s3:::abc", false),
            (
                "arn:aws:sqs:*:*:slate-?",
                "arn:aws:sqs:us-east-1:1:slate-q",
                true,
            ),
            (
                "arn:aws:sqs:*:*:slate-?",
                "arn:aws:sqs:us-east-1:1:slate-qq",
                false,
            ),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ];
        for (p, t, want) in cases {
            assert_eq!(glob(p, t), want, "{p} ~ {t}");
        }
        // many stars against a long text end quickly
        let p = "*a".repeat(40) + "b";
        assert!(!glob(&p, &"a".repeat(2000)));
    }

    #[test]
    fn policies_are_read_and_merged() {
        let ours = merge_policy(None, &g("bkt")).unwrap().unwrap();
        assert_eq!(policy_refuses(Some(&ours), &g("bkt")), None);
        assert!(
            policy_refuses(Some(&ours), &g("another")).is_some(),
            "scoped to the bucket"
        );
        assert_eq!(
            merge_policy(Some(&ours), &g("bkt")).unwrap(),
            None,
            "idempotent"
        );
        // a second bucket adds its statement beside the first
        let two = merge_policy(Some(&ours), &g("b2")).unwrap().unwrap();
        assert_eq!(policy_refuses(Some(&two), &g("bkt")), None);
        assert_eq!(policy_refuses(Some(&two), &g("b2")), None);
        let cases = [
            (None, Some("no policy")),
            (Some("not json"), Some("no JSON")),
            (
                Some(
                    r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"sqs:*","Resource":"*"}}"#,
                ),
                None,
            ),
            (
                Some(
                    r#"{"Statement":[{"Effect":"Allow","Principal":{"Service":"s3.amazonaws.com"},"Action":"sqs:SendMessage","Resource":"arn:aws:sqs:*:*:slate-*","Condition":{"ArnLike":{"aws:SourceArn":"arn:aws:s3:::b*"}}}]}"#,
                ),
                None,
            ),
            (
                Some(
                    r#"{"Statement":[{"Effect":"Allow","Principal":{"Service":"s3.amazonaws.com"},"Action":"sqs:SendMessage","Resource":"arn:aws:sqs:*:*:other","Condition":{"ArnLike":{"aws:SourceArn":"arn:aws:s3:::bkt"}}}]}"#,
                ),
                Some("no statement"),
            ),
            (
                Some(
                    r#"{"Statement":[{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:root"},"Action":"sqs:SendMessage","Resource":"*"}]}"#,
                ),
                Some("no statement"),
            ),
            (
                Some(
                    r#"{"Statement":[{"Sid":"all","Effect":"Allow","Principal":"*","Action":"*"},{"Sid":"nope","Effect":"Deny","Principal":{"Service":"s3.amazonaws.com"},"Action":"sqs:SendMessage","Condition":{"ArnEquals":{"aws:SourceArn":"arn:aws:s3:::bkt"}}}]}"#,
                ),
                Some("denies bucket bkt sqs:SendMessage (statement 'nope')"),
            ),
            // the common TLS-only deny: AWS's services deliver over TLS, so it does not apply
            (
                Some(
                    r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sqs:*"},{"Sid":"tls","Effect":"Deny","Principal":"*","Action":"*","Condition":{"Bool":{"aws:SecureTransport":"false"}}}]}"#,
                ),
                None,
            ),
            // …IfExists on a key the call has is the plain operator
            (
                Some(
                    r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sqs:*"},{"Sid":"others","Effect":"Deny","Principal":"*","Action":"sqs:SendMessage","Condition":{"ArnNotLikeIfExists":{"aws:SourceArn":"arn:aws:s3:::bkt"}}}]}"#,
                ),
                None,
            ),
            (
                Some(
                    r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sqs:*"},{"Sid":"others","Effect":"Deny","Principal":"*","Action":"sqs:SendMessage","Condition":{"ArnNotLikeIfExists":{"aws:SourceArn":"arn:aws:s3:::other"}}}]}"#,
                ),
                Some("denies bucket bkt sqs:SendMessage (statement 'others')"),
            ),
            // NotPrincipal, NotAction, NotResource deny everything they do not name
            (
                Some(
                    r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sqs:*"},{"Sid":"np","Effect":"Deny","NotPrincipal":{"AWS":"arn:aws:iam::1:root"},"Action":"sqs:*"}]}"#,
                ),
                Some("(statement 'np')"),
            ),
            (
                Some(
                    r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sqs:*"},{"Sid":"np","Effect":"Deny","NotPrincipal":{"Service":"s3.amazonaws.com"},"Action":"sqs:*"}]}"#,
                ),
                None,
            ),
            (
                Some(
                    r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sqs:*"},{"Sid":"na","Effect":"Deny","Principal":"*","NotAction":"sqs:ReceiveMessage"}]}"#,
                ),
                Some("(statement 'na')"),
            ),
            (
                Some(
                    r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sqs:*"},{"Sid":"nr","Effect":"Deny","Principal":"*","Action":"sqs:*","NotResource":"arn:aws:sqs:*:*:other"}]}"#,
                ),
                Some("(statement 'nr')"),
            ),
            (
                Some(
                    r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sqs:*"},{"Sid":"nr","Effect":"Deny","Principal":"*","Action":"sqs:*","NotResource":"arn:aws:sqs:*:*:slate-*"}]}"#,
                ),
                None,
            ),
            // a deny on a key slate cannot evaluate is no sure refusal (policy_doubts says it)
            (
                Some(
                    r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sqs:*"},{"Sid":"acct","Effect":"Deny","Principal":"*","Action":"sqs:*","Condition":{"StringNotEquals":{"aws:SourceAccount":"123"}}}]}"#,
                ),
                None,
            ),
        ];
        for (policy, want) in cases {
            let got = policy_refuses(policy, &g("bkt"));
            match want {
                None => assert_eq!(got, None, "{policy:?}"),
                Some(w) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(w)),
                    "{policy:?}: {got:?}"
                ),
            }
        }
        // the grants of a fan-out: S3 → topic, topic → queue
        let t = "arn:aws:sns:us-east-1:123456789012:fan";
        let topic = merge_policy(None, &Grant::s3_to_topic("bkt", t))
            .unwrap()
            .unwrap();
        assert_eq!(
            policy_refuses(Some(&topic), &Grant::s3_to_topic("bkt", t)),
            None
        );
        assert!(policy_refuses(Some(&topic), &Grant::s3_to_queue("bkt", t)).is_some());
        let q = merge_policy(None, &Grant::topic_to_queue(t, Q))
            .unwrap()
            .unwrap();
        assert_eq!(policy_refuses(Some(&q), &Grant::topic_to_queue(t, Q)), None);
        assert!(
            policy_refuses(Some(&q), &g("bkt")).is_some(),
            "a topic's grant is no bucket's"
        );
        assert_eq!(
            policy_refuses(
                Some(&q),
                &Grant::topic_to_queue("arn:aws:sns:us-east-1:123456789012:other", Q)
            )
            .as_deref(),
            Some(
                "the queue's policy has no statement that lets topic other (sns.amazonaws.com) \
                 sqs:SendMessage"
            )
        );
        // an allow under a condition slate cannot read (SNS's default policy: the owner
        // account) passes a check, but setup adds its own statement beside it
        let default = r#"{"Statement":[{"Sid":"__default","Effect":"Allow","Principal":{"AWS":"*"},"Action":["SNS:Publish","SNS:Subscribe"],"Resource":"arn:aws:sns:us-east-1:123456789012:fan","Condition":{"StringEquals":{"AWS:SourceOwner":"123456789012"}}}]}"#;
        let fan = Grant::s3_to_topic("bkt", t);
        assert_eq!(policy_refuses(Some(default), &fan), None);
        let merged = merge_policy(Some(default), &fan).unwrap().unwrap();
        assert!(
            merged.contains("__default") && merged.contains("slate-s3-bkt"),
            "{merged}"
        );
        // a deny that may apply is a doubt, not a refusal; one that cannot, neither
        let acct = r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sqs:*"},{"Sid":"acct","Effect":"Deny","Principal":"*","Action":"sqs:*","Condition":{"StringNotEquals":{"aws:SourceAccount":"123"}}}]}"#;
        assert!(policy_doubts(Some(acct), &g("bkt"))
            .is_some_and(|d| d.contains("may deny bucket bkt") && d.contains("'acct'")));
        assert_eq!(merge_policy(Some(acct), &g("bkt")).unwrap(), None);
        let tls = r#"{"Statement":[{"Effect":"Deny","Principal":"*","Action":"*","Condition":{"Bool":{"aws:SecureTransport":"false"}}}]}"#;
        assert_eq!(policy_doubts(Some(tls), &g("bkt")), None);
        assert!(merge_policy(Some(tls), &g("bkt")).unwrap().is_some());
        // a deny is not rewritten
        let deny = r#"{"Statement":[{"Effect":"Deny","Principal":"*","Action":"sqs:*"}]}"#;
        assert!(merge_policy(Some(deny), &g("bkt"))
            .unwrap_err()
            .contains("denies"));
        // others' statements are kept
        let other = r#"{"Version":"2012-10-17","Statement":[{"Sid":"mine","Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:root"},"Action":"sqs:ReceiveMessage","Resource":"*"}]}"#;
        let merged: Value =
            serde_json::from_str(&merge_policy(Some(other), &g("bkt")).unwrap().unwrap()).unwrap();
        let sids: Vec<_> = merged["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["Sid"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(sids, vec!["mine", "slate-s3-bkt"]);
    }
}
