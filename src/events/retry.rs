//! `slate deadletters retry`: a dead letter read again by the parser of the transport it came
//! from and routed to the pairs of the database as they are now (a pair created since, a
//! parser fixed since), its events stored in the inbox of each pair they name: the one path
//! events take, so the daemon running the pair applies them as it applies any event. A letter
//! that still cannot be used stays, with what the retry found.

use std::collections::HashMap;
use std::sync::Arc;

use super::route::{join_reasons, strangers, Routed, Scope};
use super::Parsed;
use crate::core::error::Result;
use crate::core::location::Location;
use crate::state::deadletters::{DeadLetters, Letter};
use crate::state::inbox::{DeadLetter, Intake, Kind};
use crate::state::manifest::Manifest;

/// The scheme short name (`s3`, `az`, `gs`) of the pairs a transport feeds.
fn what_of(source: &str) -> Option<&'static str> {
    match source {
        "sqs" => Some("s3"),
        "azqueue" | "webhook-eventgrid" => Some("az"),
        "pubsub" | "webhook-pubsub" => Some("gs"),
        _ => None,
    }
}

/// The letter through its transport's parser again.
pub fn reparse(l: &Letter) -> std::result::Result<Parsed, String> {
    let text = |b: &[u8]| {
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| "body is not UTF-8".to_string())
    };
    let e = |e: super::ParseError| e.to_string();
    match l.source.as_str() {
        "sqs" => super::parse_s3(&text(&l.raw)?).map_err(e),
        "azqueue" => {
            let json = match &l.decoded {
                Some(d) => text(d)?,
                None => super::decode_queue_message(&text(&l.raw)?).map_err(e)?,
            };
            super::parse_eventgrid(&json).map_err(e)
        }
        "webhook-eventgrid" => super::parse_eventgrid(&text(&l.raw)?).map_err(e),
        "webhook-pubsub" => super::parse_gcs_push(&text(&l.raw)?).map_err(e),
        "pubsub" => {
            // what the pull consumer kept: {"attributes": {…}, "data": "…"}
            #[derive(serde::Deserialize)]
            struct Pulled {
                attributes: HashMap<String, String>,
                data: String,
            }
            let p: Pulled = serde_json::from_slice(&l.raw)
                .map_err(|err| format!("dead letter: not a pulled message ({err})"))?;
            super::parse_gcs(&p.attributes, p.data.as_bytes()).map_err(e)
        }
        other => Err(format!("a dead letter of '{other}' cannot be read again")),
    }
}

/// What a retry of `l` stores, routed to `pairs` (id, source location).
pub fn route(l: &Letter, pairs: &[(i64, Location)]) -> Intake {
    let mut intake = Intake::default();
    let keep = |reason: String, pair_id: Option<i64>| DeadLetter {
        pair_id,
        source: l.source.clone(),
        queue: l.queue.clone(),
        raw: Vec::new(),
        decoded: None,
        reason,
    };
    // a key the daemon could not apply: the key again, for its pair
    if l.source == "apply" {
        match (l.pair_id, std::str::from_utf8(&l.raw)) {
            (Some(p), Ok(key)) if pairs.iter().any(|(id, _)| *id == p) => {
                intake
                    .rows
                    .push((p, key.to_string(), Kind::Upsert, None, None));
            }
            _ => intake.dead.push(keep("its pair is gone".into(), l.pair_id)),
        }
        return intake;
    }
    let Some(what) = what_of(&l.source) else {
        intake.dead.push(keep(
            format!("a dead letter of '{}' cannot be read again", l.source),
            l.pair_id,
        ));
        return intake;
    };
    let parsed = match reparse(l) {
        Ok(p) => p,
        Err(why) => {
            intake.dead.push(keep(why, None));
            return intake;
        }
    };
    if matches!(parsed, Parsed::Ignore(_) | Parsed::Handshake { .. }) {
        return intake;
    }
    let targets: Vec<(i64, Scope)> = pairs
        .iter()
        .filter(|(_, loc)| loc.scheme.short() == what)
        .map(|(id, loc)| (*id, Scope::of(loc)))
        .collect();
    let scopes: Vec<Scope> = targets.iter().map(|(_, s)| s.clone()).collect();
    let mut reasons = if targets.is_empty() {
        vec![format!("no {what}:// pair in the database")]
    } else {
        Vec::new()
    };
    reasons.extend(strangers(&parsed, &scopes, what).reasons);
    // the letter stays its pair's when that pair's own unaddressable keys are all that keeps
    // it (as the fan-out counts it), else no pair's
    let nobody = !reasons.is_empty();
    let mut owners = std::collections::BTreeSet::new();
    for (id, scope) in &targets {
        let mut routed = Routed::default();
        routed.add(parsed.clone(), scope, what);
        if !routed.dead.is_empty() {
            owners.insert(*id);
        }
        reasons.extend(routed.dead);
        intake.rows.extend(
            routed
                .rows
                .into_iter()
                .map(|(k, kind, tok, at)| (*id, k, kind, tok, at)),
        );
        intake
            .prefixes
            .extend(routed.prefixes.into_iter().map(|p| (*id, p)));
    }
    if !reasons.is_empty() {
        let owner = match (nobody, owners.len()) {
            (false, 1) => owners.into_iter().next(),
            _ => None,
        };
        intake.dead.push(keep(join_reasons(&reasons), owner));
    }
    intake
}

/// What a retry of some letters did.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Retried {
    /// Letters whose events are in the inbox now (the letter is gone).
    pub stored: Vec<i64>,
    /// Letters kept: (id, why they still cannot be used). Good events of such a letter were
    /// stored all the same.
    pub kept: Vec<(i64, String)>,
    /// Ids asked for that are not (or no longer) dead letters.
    pub unknown: Vec<i64>,
}

/// Retries the letters `ids` (in the order given).
pub async fn retry(db: Arc<Manifest>, ids: Vec<i64>) -> Result<Retried> {
    crate::state::blocking(move || {
        let dl = DeadLetters::new(&db);
        let pairs: Vec<(i64, Location)> = dl
            .pair_sources()?
            .into_iter()
            .filter_map(|(id, src)| match Location::parse(&src) {
                Ok(l) => Some((id, l)),
                Err(e) => {
                    // a remote this process cannot resolve: its letters stay, and say so
                    tracing::warn!(pair = id, error = %e, "pair left out of the routing of retried letters");
                    None
                }
            })
            .collect();
        let mut out = Retried::default();
        for id in ids {
            let Some(letter) = dl.get(id)? else {
                out.unknown.push(id);
                continue;
            };
            let intake = route(&letter, &pairs);
            if !dl.settle_retry(id, &intake)? {
                out.unknown.push(id);
            } else if let Some(d) = intake.dead.first() {
                out.kept.push((id, d.reason.clone()));
            } else {
                out.stored.push(id);
            }
        }
        Ok(out)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(source: &str, raw: &str) -> Letter {
        Letter {
            id: 1,
            pair_id: None,
            source: source.into(),
            queue: "q".into(),
            reason: "r".into(),
            received_at: 0,
            raw: raw.as_bytes().to_vec(),
            decoded: None,
        }
    }

    #[test]
    fn a_letter_is_routed_to_the_pairs_of_now() {
        let s3 = r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"data/k"}}}]}"#;
        let odd = r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"data/x//outside+the+pair"}}}]}"#;
        let pairs = vec![
            (7, Location::parse("s3://b/data").unwrap()),
            (8, Location::parse("az://b/data").unwrap()),
        ];
        // (source, raw, pairs, rows, kept)
        type Case<'a> = (&'a str, &'a str, &'a [(i64, Location)], usize, bool);
        let table: Vec<Case> = vec![
            ("sqs", s3, &pairs, 1, false),
            // the pair is not there (yet): kept
            ("sqs", s3, &pairs[1..], 0, true),
            ("sqs", "{not json", &pairs, 0, true),
            ("who-knows", s3, &pairs, 0, true),
            // an unaddressable key whose text reads like another reason: still kept
            ("sqs", odd, &pairs, 0, true),
        ];
        for (source, raw, pairs, rows, kept) in table {
            let got = route(&letter(source, raw), pairs);
            assert_eq!(got.rows.len(), rows, "{source} {raw}: {got:?}");
            assert_eq!(!got.dead.is_empty(), kept, "{source} {raw}: {got:?}");
        }
        // kept for its own pair's key: still counted under that pair
        assert_eq!(route(&letter("sqs", odd), &pairs).dead[0].pair_id, Some(7));
        let got = route(&letter("sqs", s3), &pairs);
        assert_eq!(got.rows[0], (7, "k".to_string(), Kind::Upsert, None, None));
        // a key the daemon could not apply goes back to its pair
        let mut apply = letter("apply", "a/b");
        apply.pair_id = Some(7);
        assert_eq!(
            route(&apply, &pairs).rows,
            vec![(7, "a/b".to_string(), Kind::Upsert, None, None)]
        );
    }
}
