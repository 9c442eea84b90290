//! Where change events come from: turns one cloud message (an SQS body, an Event Grid
//! delivery, a Pub/Sub message) into normalised [`ChangeEvent`]s, which the daemon stores in
//! the inbox before it acknowledges the message (docs/ARCHITECTURE.md, "The data flow").
//!
//! cloud message → `events::parse_*` → [`Parsed`] → inbox → reconcile → copy.
//!
//! The cloud parsers are pure: text or bytes in, [`Parsed`] or [`ParseError`] out; no I/O,
//! no clock, no panics on any input. An event is only a hint that a key changed: the reconciler
//! reads the source's current state before acting, so a parser may be strict (a malformed
//! message becomes a dead letter and the periodic drift check repairs whatever it named).
//!
//! - [`s3`]: S3 event notifications as SQS bodies, raw, SNS-wrapped or EventBridge-shaped.
//! - [`eventgrid`]: Azure Blob Storage events, Event Grid schema and CloudEvents 1.0, from
//!   the webhook or from a Storage Queue (base64).
//! - [`gcs`]: Cloud Storage Pub/Sub notifications, pulled (attributes + data) or pushed.
//! - [`watch`]: a local folder (inotify).
//!
//! Transports (they receive, store through [`route`], then acknowledge): [`sqs`] (S3 via SQS),
//! [`azqueue`] (Event Grid via a Storage Queue), [`pubsub`] (GCS via a pull subscription),
//! [`webhook`] (Event Grid and Pub/Sub push on
//! slate's listener).

pub mod azqueue;
pub mod changefeed;
pub mod entra;
pub mod eventbridge;
pub mod eventgrid;
pub mod gcs;
pub mod pubsub;
pub mod push;
pub mod retry;
pub mod route;
pub mod s3;
pub mod sns;
pub mod source;
pub mod sqs;
pub mod watch;
pub mod wiring;
pub mod wiring_azure;
pub mod wiring_gcs;

mod text;

pub use eventgrid::{decode_queue_message, parse_eventgrid};
pub use gcs::{parse_gcs, parse_gcs_push};
pub use s3::parse_s3;

use std::cmp::Ordering;

/// Largest message body a parser accepts: 1 MiB, the largest delivery any transport makes
/// (Event Grid batches deliveries of up to 1 MB; SQS messages and Pub/Sub pushes are smaller).
/// The webhook accepts exactly this much ([`push::MAX_DELIVERY`]), so a delivery the listener
/// took is never refused by its parser.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Most reasons kept for the malformed events of one message; the rest are counted (a message
/// of 100,000 bad elements keeps 10 reasons and "and 99,990 more").
pub const MAX_REASONS: usize = 10;

/// The malformed events of one message, as a parser meets them: the first [`MAX_REASONS`]
/// reasons kept, the others only counted, so that memory stays bounded whatever the message.
#[derive(Debug, Default)]
pub(crate) struct Bad {
    kept: Vec<ParseError>,
    more: usize,
}

impl Bad {
    pub(crate) fn push(&mut self, e: ParseError) {
        // one place left for the count of the rest
        if self.kept.len() < MAX_REASONS - 1 {
            self.kept.push(e);
        } else {
            self.more += 1;
        }
    }
}

/// What happened to a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// Created, overwritten, or its metadata changed: copy it if it differs.
    Upsert,
    /// Gone at the source (deleted, expired, or renamed away), unless it has come back since.
    Delete,
}

/// One key changed, normalised across providers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeEvent {
    /// S3 bucket, Azure container or GCS bucket; "" for a local folder.
    pub bucket: String,
    /// The full object key, decoded (not relative to any prefix); never empty, never with NUL.
    pub key: String,
    pub kind: EventKind,
    /// The object's ETag as the provider gave it (Azure's may carry quotes).
    pub etag: Option<String>,
    /// Size in bytes, when the event says (creates usually do, deletes usually do not).
    pub size: Option<u64>,
    /// Per-key ordering token; compare only tokens of the same key.
    pub sequencer: Option<Token>,
    /// The provider's event time, as given (RFC 3339 from the clouds; moto omits the zone).
    pub event_time: Option<String>,
    /// The provider's id for this event, if it has one (for dedupe).
    pub id: Option<String>,
}

/// A provider's event time as unix milliseconds: RFC 3339 with any fraction (S3's
/// milliseconds, Event Grid's seven digits, Pub/Sub's microseconds) and zone; a time without
/// a zone (moto's, some S3-compatibles') is UTC. None for anything else.
pub fn event_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_millis());
    }
    chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
        .ok()
        .map(|t| t.and_utc().timestamp_millis())
}

/// A per-key ordering token. Tokens of different providers are incomparable, and so are
/// tokens of different keys (the caller's duty: nothing here knows the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// S3 `sequencer`: hexadecimal, of varying length.
    S3(String),
    /// Event Grid (Azure Blob) `sequencer`: opaque, ordered by plain string comparison.
    EventGrid(String),
    /// GCS object generation and metageneration.
    Gcs {
        generation: u64,
        metageneration: u64,
    },
}

impl Token {
    /// Orders two tokens of the same kind: S3 left-pads the shorter with zeros and compares
    /// the hex digits case-insensitively; Event Grid compares the strings; GCS compares
    /// (generation, metageneration). `None` when the kinds differ or an S3 sequencer is not
    /// hexadecimal.
    pub fn compare(&self, other: &Token) -> Option<Ordering> {
        match (self, other) {
            (Token::S3(a), Token::S3(b)) => compare_hex(a, b),
            (Token::EventGrid(a), Token::EventGrid(b)) => Some(a.as_str().cmp(b.as_str())),
            (
                Token::Gcs {
                    generation: g1,
                    metageneration: m1,
                },
                Token::Gcs {
                    generation: g2,
                    metageneration: m2,
                },
            ) => Some((g1, m1).cmp(&(g2, m2))),
            _ => None,
        }
    }

    /// `Some(true)` when `self` is strictly newer than `other`, `Some(false)` when older or
    /// equal, `None` when they cannot be compared (see [`Token::compare`]).
    pub fn newer_than(&self, other: &Token) -> Option<bool> {
        self.compare(other).map(|o| o == Ordering::Greater)
    }
}

/// S3's rule: left-pad the shorter sequencer with zeros, then compare. Stripping leading zeros
/// and comparing length first is the same thing without allocating.
fn compare_hex(a: &str, b: &str) -> Option<Ordering> {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_hexdigit());
    if !hex(a) || !hex(b) {
        return None;
    }
    let (a, b) = (a.trim_start_matches('0'), b.trim_start_matches('0'));
    let lower = |s: &str| {
        s.bytes()
            .map(|c| c.to_ascii_lowercase())
            .collect::<Vec<u8>>()
    };
    Some(a.len().cmp(&b.len()).then_with(|| lower(a).cmp(&lower(b))))
}

/// The outcome of parsing one cloud message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Keys that changed, in message order (never empty).
    Events(Vec<ChangeEvent>),
    /// A well-formed message that names no change to act on; ack it. The reason is short and
    /// fixed (e.g. `"s3:TestEvent"`, `"overwritten"`).
    Ignore(&'static str),
    /// Event Grid's webhook subscription handshake (Event Grid schema only; CloudEvents
    /// webhooks validate with an HTTP OPTIONS request instead, which is the server's job):
    /// answer `{"validationResponse": validation_code}`.
    Handshake { validation_code: String },
    /// A directory changed as a whole (ADLS Gen2 / hierarchical namespace: directory deleted
    /// or renamed): list and reconcile every key under `prefix` (ends with `/`).
    PrefixReconcile { bucket: String, prefix: String },
    /// One message that carried several of the above (an Event Grid batch mixing blob and
    /// directory events, or a directory rename: old and new prefix). Never nested, never
    /// empty, at most one `Events`, no `Ignore`; `Invalid` entries come last, and only next to
    /// at least one entry that is not `Invalid`.
    Batch(Vec<Parsed>),
    /// One malformed event of a message that carried several (an Event Grid batch, S3
    /// `Records`), found only inside a [`Parsed::Batch`] beside the good ones: the reason, as a
    /// [`ParseError`] gives it (names the field, never the value). The consumer dead-letters
    /// the message with this reason and keeps the good events; a message with nothing good in
    /// it fails as a whole instead.
    Invalid(String),
}

impl Parsed {
    /// Folds the outcomes of the events of one message into one: all change events into one
    /// `Events` (first), then the others, then the invalid ones; ignores only count when
    /// nothing else is left.
    pub(crate) fn combine(items: Vec<Parsed>) -> Parsed {
        #[derive(Default)]
        struct Parts {
            events: Vec<ChangeEvent>,
            others: Vec<Parsed>,
            invalid: Vec<Parsed>,
            ignored: Option<&'static str>,
        }
        fn flatten(item: Parsed, parts: &mut Parts) {
            match item {
                Parsed::Events(e) => parts.events.extend(e),
                Parsed::Ignore(why) => {
                    parts.ignored.get_or_insert(why);
                }
                Parsed::Batch(inner) => {
                    for i in inner {
                        flatten(i, parts);
                    }
                }
                bad @ Parsed::Invalid(_) => parts.invalid.push(bad),
                other => parts.others.push(other),
            }
        }
        let mut parts = Parts::default();
        for item in items {
            flatten(item, &mut parts);
        }
        let Parts {
            events,
            mut others,
            mut invalid,
            ignored,
        } = parts;
        let mut out = Vec::with_capacity(others.len() + invalid.len() + 1);
        if !events.is_empty() {
            out.push(Parsed::Events(events));
        }
        out.append(&mut others);
        out.append(&mut invalid);
        match out.len() {
            0 => Parsed::Ignore(ignored.unwrap_or("no events")),
            1 => out.pop().unwrap_or(Parsed::Ignore("no events")),
            _ => Parsed::Batch(out),
        }
    }

    /// The outcome of a message whose events were parsed one by one: the good ones combined,
    /// each bad one beside them as [`Parsed::Invalid`], so that one malformed event does not
    /// take the others to the dead letters with it. When nothing good is left to act on (no
    /// event but ignored ones), the message fails as a whole: the first bad event's reason,
    /// with how many more there were.
    pub(crate) fn from_parts(good: Vec<Parsed>, bad: Bad) -> Result<Parsed, ParseError> {
        let good = Parsed::combine(good);
        let Bad {
            kept,
            more: uncounted,
        } = bad;
        let mut bad = kept.into_iter();
        let Some(first) = bad.next() else {
            return Ok(good);
        };
        if matches!(good, Parsed::Ignore(_)) {
            let more = bad.len() + uncounted;
            return Err(if more == 0 {
                first
            } else {
                ParseError::new(format!(
                    "{} (and {more} more malformed event{})",
                    first.reason,
                    if more == 1 { "" } else { "s" }
                ))
            });
        }
        let rest = (uncounted > 0).then(|| {
            ParseError::new(format!(
                "and {uncounted} more malformed event{}",
                if uncounted == 1 { "" } else { "s" }
            ))
        });
        let invalid = std::iter::once(first)
            .chain(bad)
            .chain(rest)
            .map(|e| Parsed::Invalid(e.reason));
        Ok(Parsed::combine(
            std::iter::once(good).chain(invalid).collect(),
        ))
    }

    /// The change events, if this is [`Parsed::Events`] (handy in tests and callers that only
    /// handle plain events).
    pub fn events(&self) -> Option<&[ChangeEvent]> {
        match self {
            Parsed::Events(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a message could not be parsed: one short line naming the field, never the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ParseError {
    pub reason: String,
}

impl ParseError {
    /// Longest reason kept; a longer one is cut (on a character boundary) and marked `…`.
    const MAX_REASON: usize = 300;

    /// A reason made safe to log: control characters become spaces, length is bounded.
    pub fn new(reason: impl Into<String>) -> Self {
        let mut reason: String = reason
            .into()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if reason.len() > Self::MAX_REASON {
            let mut cut = Self::MAX_REASON;
            while !reason.is_char_boundary(cut) {
                cut -= 1;
            }
            reason.truncate(cut);
            reason.push('…');
        }
        ParseError { reason }
    }
}

/// Test helper: `got` is an error whose reason starts with `want` and does not echo `secret`.
#[cfg(test)]
pub(crate) fn assert_rejected(
    got: Result<Parsed, ParseError>,
    want: &str,
    secret: &str,
) -> ParseError {
    match got {
        Ok(p) => panic!("{want}: parsed {p:?}"),
        Err(e) => {
            assert!(
                e.reason.starts_with(want),
                "want '{want}…', got '{}'",
                e.reason
            );
            assert!(!e.reason.contains(secret), "echoed the input: {}", e.reason);
            e
        }
    }
}

/// Test helper: a change event with nothing but its bucket, key and kind.
#[cfg(test)]
pub(crate) fn change(bucket: &str, key: &str, kind: EventKind) -> ChangeEvent {
    ChangeEvent {
        bucket: bucket.into(),
        key: key.into(),
        kind,
        etag: None,
        size: None,
        sequencer: None,
        event_time: None,
        id: None,
    }
}

/// Test helper: `count` deterministic mutants of `input` (truncations, byte flips, cuts, and
/// hostile fragments spliced in), for the parsers' never-panic tests.
#[cfg(test)]
pub(crate) fn mutants(input: &[u8], count: usize) -> Vec<Vec<u8>> {
    const SPICE: &[&[u8]] = &[
        b"%",
        b"%0",
        b"%00",
        b"%C3%28",
        b"%FF",
        b"\\u0000",
        b"\\ud800",
        b"+",
        b"\"",
        b"{",
        b"}",
        b"[",
        b"]",
        b"null",
        b"-1",
        b"1e999",
        b"18446744073709551616",
        b"\xff",
        b"/",
        b"/blobs/",
        b"://",
        b",",
        b":",
        b"=",
        b"\\",
    ];
    let mut state = 0x9E37_79B9_7F4A_7C15_u64 ^ input.len() as u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let mut m = input.to_vec();
            for _ in 0..=next() % 4 {
                let at = (next() as usize) % (m.len() + 1);
                match next() % 4 {
                    0 => m.truncate(at),
                    1 => {
                        let s = SPICE[(next() as usize) % SPICE.len()];
                        m.splice(at..at, s.iter().copied());
                    }
                    2 => {
                        if let Some(b) = m.get_mut(at) {
                            *b = next() as u8;
                        }
                    }
                    _ => {
                        let end = (at + (next() as usize) % 16).min(m.len());
                        m.drain(at..end);
                    }
                }
            }
            m
        })
        .collect()
}

/// Test helper: every variant of `v` with one node replaced by a hostile value of another
/// type or shape, or (for object members) removed: reaches every field check of a parser.
#[cfg(test)]
pub(crate) fn value_mutants(v: &serde_json::Value) -> Vec<serde_json::Value> {
    use serde_json::{json, Value};
    fn walk(v: &Value, rebuild: &dyn Fn(Option<Value>) -> Value, out: &mut Vec<Value>) {
        let hostile = [
            json!(null),
            json!(true),
            json!(-1),
            json!(1.5),
            json!(u64::MAX),
            json!(""),
            json!("%"),
            json!("%C3%28"),
            json!("a\u{0}b"),
            json!("/blobServices/default/containers/c/blobs/"),
            json!("https://h/"),
            json!([]),
            json!({}),
        ];
        for h in hostile {
            out.push(rebuild(Some(h)));
        }
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    let sub = |replacement: Option<Value>| {
                        let mut m = map.clone();
                        match replacement {
                            Some(r) => {
                                m.insert(k.clone(), r);
                            }
                            None => {
                                m.remove(k);
                            }
                        }
                        rebuild(Some(Value::Object(m)))
                    };
                    out.push(sub(None));
                    walk(child, &sub, out);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    let sub = |replacement: Option<Value>| {
                        let mut a = items.clone();
                        match replacement {
                            Some(r) => a[i] = r,
                            None => {
                                a.remove(i);
                            }
                        }
                        rebuild(Some(Value::Array(a)))
                    };
                    walk(child, &sub, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, &|r: Option<Value>| r.unwrap_or(Value::Null), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(s: &str) -> Token {
        Token::S3(s.into())
    }
    fn eg(s: &str) -> Token {
        Token::EventGrid(s.into())
    }
    fn gcs(generation: u64, metageneration: u64) -> Token {
        Token::Gcs {
            generation,
            metageneration,
        }
    }

    #[test]
    fn event_times_from_every_provider() {
        let cases = [
            ("2016-11-06T21:32:00.000Z", Some(1_478_467_920_000)),
            ("2017-06-26T18:41:00.9584103Z", Some(1_498_502_460_958)),
            ("2024-05-01T12:00:00.123456Z", Some(1_714_564_800_123)),
            ("2024-05-01T14:00:00+02:00", Some(1_714_564_800_000)),
            ("2024-05-01T12:00:00.5", Some(1_714_564_800_500)),
            ("1970-01-01T00:00:00.000Z", Some(0)),
            ("yesterday", None),
            ("", None),
            ("2024-13-01T00:00:00Z", None),
        ];
        for (text, want) in cases {
            assert_eq!(event_ms(text), want, "{text}");
        }
    }

    #[test]
    fn token_ordering_table() {
        // (a, b, a.newer_than(b))
        let cases: Vec<(Token, Token, Option<bool>)> = vec![
            // S3: left-pad the shorter with zeros, then compare.
            (s3("00B"), s3("0A"), Some(true)),
            (s3("0A"), s3("00B"), Some(false)),
            (s3("0A"), s3("00A"), Some(false)), // equal after padding: not newer
            (s3("00A"), s3("0A"), Some(false)),
            (s3("10"), s3("F"), Some(true)), // longer significant value wins
            (s3("F"), s3("10"), Some(false)),
            (
                s3("0055AED6DCD90281E5"),
                s3("0055AED6DCD90281E4"),
                Some(true),
            ),
            (s3("617f08299329d189"), s3("0055AED6DCD90281E5"), Some(true)),
            (
                s3("00617F08299329D189"),
                s3("617f08299329d189"),
                Some(false),
            ), // case-insensitive equal
            (s3("617f08299329d18a"), s3("617F08299329D189"), Some(true)),
            (s3("0"), s3("000"), Some(false)),
            (s3(""), s3("0A"), None),    // empty is not hex
            (s3("0G"), s3("0A"), None),  // not hex
            (s3("0A"), s3("xyz"), None), // not hex
            // Event Grid: plain string comparison.
            (
                eg("00000000000004420000000000028963"),
                eg("0000000000000281000000000002F5CA"),
                Some(true),
            ),
            (
                eg("0000000000000281000000000002F5CA"),
                eg("00000000000004420000000000028963"),
                Some(false),
            ),
            (eg("abc"), eg("abc"), Some(false)),
            (eg("b"), eg("abc"), Some(true)), // string order, not numeric
            // GCS: (generation, metageneration) numerically.
            (
                gcs(1700000000000002, 1),
                gcs(1700000000000001, 9),
                Some(true),
            ),
            (gcs(5, 2), gcs(5, 1), Some(true)),
            (gcs(5, 1), gcs(5, 1), Some(false)),
            (gcs(10, 1), gcs(9, 1), Some(true)), // numeric, not "10" < "9"
            // Different kinds never compare.
            (s3("0A"), eg("0A"), None),
            (eg("1"), gcs(1, 1), None),
            (gcs(1, 1), s3("1"), None),
        ];
        for (i, (a, b, want)) in cases.iter().enumerate() {
            assert_eq!(a.newer_than(b), *want, "case {i}: {a:?} newer than {b:?}");
        }
    }

    #[test]
    fn compare_reports_equality() {
        assert_eq!(s3("0A").compare(&s3("00a")), Some(Ordering::Equal));
        assert_eq!(gcs(3, 1).compare(&gcs(3, 2)), Some(Ordering::Less));
        assert_eq!(s3("1").compare(&eg("1")), None);
    }

    #[test]
    fn parse_error_is_one_short_line() {
        let e = ParseError::new(format!("line one\nline two\r{}", "é".repeat(400)));
        let shown = e.to_string();
        assert!(!shown.contains('\n') && !shown.contains('\r'), "{shown}");
        assert!(shown.len() <= ParseError::MAX_REASON + '…'.len_utf8());
        assert!(shown.ends_with('…'));
    }

    fn ev(key: &str) -> ChangeEvent {
        change("b", key, EventKind::Upsert)
    }

    #[test]
    fn combine_table() {
        let prefix = |p: &str| Parsed::PrefixReconcile {
            bucket: "b".into(),
            prefix: p.into(),
        };
        let cases: Vec<(Vec<Parsed>, Parsed)> = vec![
            (vec![], Parsed::Ignore("no events")),
            (
                vec![Parsed::Ignore("x"), Parsed::Ignore("y")],
                Parsed::Ignore("x"),
            ),
            (
                vec![Parsed::Ignore("x"), Parsed::Events(vec![ev("a")])],
                Parsed::Events(vec![ev("a")]),
            ),
            (
                vec![Parsed::Events(vec![ev("a")]), Parsed::Events(vec![ev("b")])],
                Parsed::Events(vec![ev("a"), ev("b")]),
            ),
            (
                vec![
                    prefix("d/"),
                    Parsed::Events(vec![ev("a")]),
                    Parsed::Ignore("x"),
                ],
                Parsed::Batch(vec![Parsed::Events(vec![ev("a")]), prefix("d/")]),
            ),
            (
                vec![Parsed::Batch(vec![prefix("old/"), prefix("new/")])],
                Parsed::Batch(vec![prefix("old/"), prefix("new/")]),
            ),
            (vec![Parsed::Batch(vec![prefix("d/")])], prefix("d/")),
            (
                vec![
                    Parsed::Invalid("[0].x: missing".into()),
                    prefix("d/"),
                    Parsed::Events(vec![ev("a")]),
                ],
                Parsed::Batch(vec![
                    Parsed::Events(vec![ev("a")]),
                    prefix("d/"),
                    Parsed::Invalid("[0].x: missing".into()),
                ]),
            ),
        ];
        for (i, (items, want)) in cases.into_iter().enumerate() {
            assert_eq!(Parsed::combine(items), want, "case {i}");
        }
    }

    #[test]
    fn from_parts_keeps_the_good_and_names_each_bad() {
        let bad = |r: &str| ParseError::new(r);
        let prefix = Parsed::PrefixReconcile {
            bucket: "b".into(),
            prefix: "d/".into(),
        };
        // (good entries, bad events, outcome)
        type Case = (Vec<Parsed>, Vec<ParseError>, Result<Parsed, ParseError>);
        let cases: Vec<Case> = vec![
            (
                vec![Parsed::Events(vec![ev("a")])],
                vec![],
                Ok(Parsed::Events(vec![ev("a")])),
            ),
            (
                vec![Parsed::Events(vec![ev("a")]), Parsed::Events(vec![ev("c")])],
                vec![bad("[1].subject: missing")],
                Ok(Parsed::Batch(vec![
                    Parsed::Events(vec![ev("a"), ev("c")]),
                    Parsed::Invalid("[1].subject: missing".into()),
                ])),
            ),
            (
                vec![prefix.clone(), Parsed::Ignore("x")],
                vec![bad("[0].a: missing"), bad("[2].b: missing")],
                Ok(Parsed::Batch(vec![
                    prefix,
                    Parsed::Invalid("[0].a: missing".into()),
                    Parsed::Invalid("[2].b: missing".into()),
                ])),
            ),
            // nothing good left: the message fails as a whole, as before
            (
                vec![],
                vec![bad("[0].a: missing")],
                Err(bad("[0].a: missing")),
            ),
            (
                vec![Parsed::Ignore("x")],
                vec![
                    bad("[1].a: missing"),
                    bad("[2].b: missing"),
                    bad("[3].c: x"),
                ],
                Err(bad("[1].a: missing (and 2 more malformed events)")),
            ),
            (vec![Parsed::Ignore("x")], vec![], Ok(Parsed::Ignore("x"))),
        ];
        for (i, (good, bad, want)) in cases.into_iter().enumerate() {
            let mut b = Bad::default();
            bad.into_iter().for_each(|e| b.push(e));
            assert_eq!(Parsed::from_parts(good, b), want, "case {i}");
        }
    }

    #[test]
    fn a_message_of_many_bad_events_keeps_a_bounded_number_of_reasons() {
        let mut bad = Bad::default();
        for i in 0..100_000 {
            bad.push(ParseError::new(format!("[{i}]: expected an object")));
        }
        let got = Parsed::from_parts(vec![Parsed::Events(vec![ev("a")])], bad);
        let Ok(Parsed::Batch(items)) = got else {
            panic!("{got:?}")
        };
        // the good event, MAX_REASONS - 1 reasons, and the count of the rest
        assert_eq!(items.len(), 1 + MAX_REASONS);
        assert_eq!(
            items.last(),
            Some(&Parsed::Invalid(format!(
                "and {} more malformed events",
                100_000 - (MAX_REASONS - 1)
            )))
        );
        let mut all_bad = Bad::default();
        for i in 0..50 {
            all_bad.push(ParseError::new(format!("[{i}]: x")));
        }
        assert_eq!(
            Parsed::from_parts(vec![], all_bad),
            Err(ParseError::new("[0]: x (and 49 more malformed events)"))
        );
    }
}
