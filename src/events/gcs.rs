//! Cloud Storage Pub/Sub notifications: one message per object event. The attributes say
//! what happened (`eventType`, `bucketId`, `objectId`, `objectGeneration`, and on overwrites
//! `overwroteGeneration` / `overwrittenByGeneration`); the data, with payload format
//! `JSON_API_V1`, is the object's resource JSON (`size`, `generation` and `metageneration`
//! as decimal strings from GCS, as numbers from some emulators; `etag`, `md5Hash`).
//!
//! - `OBJECT_FINALIZE`, `OBJECT_METADATA_UPDATE` → upsert.
//! - `OBJECT_DELETE`, `OBJECT_ARCHIVE` → delete, **unless** `overwrittenByGeneration` is
//!   present: then the object was overwritten (its new generation has its own FINALIZE), and
//!   an overwrite is never a delete → `Ignore("overwritten")`.
//!
//! Pub/Sub's `messageId` is not part of the attributes: [`parse_gcs`] leaves `id` empty for
//! the pull loop to fill, [`parse_gcs_push`] takes it from the push envelope.

use std::collections::HashMap;

use super::text::{
    base64_decode, check_bucket, check_key, check_size, child, loose_str, object, opt_str, opt_u64,
    parse_json, parse_json_bytes, parse_u64,
};
use super::{ChangeEvent, EventKind, ParseError, Parsed, Token};

/// Parses one Pub/Sub message of a GCS notification: its attributes and its data bytes.
pub fn parse_gcs(attributes: &HashMap<String, String>, data: &[u8]) -> Result<Parsed, ParseError> {
    let attr_bytes: usize = attributes.iter().map(|(k, v)| k.len() + v.len()).sum();
    check_size("message", attr_bytes.saturating_add(data.len()))?;
    let attr = |name: &str| attributes.get(name).map(String::as_str);
    let required = |name: &str| {
        attr(name).ok_or_else(|| ParseError::new(format!("attributes.{name}: missing")))
    };
    let event_type = required("eventType")?;
    let bucket = check_bucket("attributes.bucketId", required("bucketId")?)?;
    let key = check_key("attributes.objectId", required("objectId")?.to_string())?;
    let attr_generation = match attr("objectGeneration") {
        None => None,
        Some(g) => Some(parse_u64(g).ok_or_else(|| {
            ParseError::new("attributes.objectGeneration: not a non-negative integer")
        })?),
    };
    let kind = match event_type {
        "OBJECT_FINALIZE" | "OBJECT_METADATA_UPDATE" => EventKind::Upsert,
        "OBJECT_DELETE" | "OBJECT_ARCHIVE" => {
            if attributes.contains_key("overwrittenByGeneration") {
                return Ok(Parsed::Ignore("overwritten"));
            }
            EventKind::Delete
        }
        _ => return Ok(Parsed::Ignore("gcs: event type not handled")),
    };

    // The object resource, when the notification carries one (payload format NONE sends none).
    let resource = if data.is_empty() || attr("payloadFormat") == Some("NONE") {
        None
    } else {
        let v = parse_json_bytes("data", data)?;
        object(&v, "data")?;
        Some(v)
    };
    let (mut etag, mut size, mut data_generation, mut metageneration) = (None, None, None, None);
    if let Some(r) = &resource {
        etag = opt_str(r, "etag", "data")?.map(str::to_string);
        size = opt_u64(r, "size", "data")?;
        data_generation = opt_u64(r, "generation", "data")?;
        metageneration = opt_u64(r, "metageneration", "data")?;
    }
    let sequencer = attr_generation
        .or(data_generation)
        .map(|generation| Token::Gcs {
            generation,
            metageneration: metageneration.unwrap_or(1),
        });
    Ok(Parsed::Events(vec![ChangeEvent {
        bucket,
        key,
        kind,
        etag,
        size,
        sequencer,
        event_time: attr("eventTime")
            .filter(|t| !t.is_empty())
            .map(str::to_string),
        id: None,
    }]))
}

/// Parses the body of a Pub/Sub push request:
/// `{"message":{"attributes":{…},"data":"<base64>","messageId":"…"},"subscription":"…"}`.
pub fn parse_gcs_push(body: &str) -> Result<Parsed, ParseError> {
    check_size("body", body.len())?;
    let v = parse_json("body", body)?;
    let message = child(&v, "message", "")?;
    let mut attributes = HashMap::new();
    if let Some(attrs) = message.get("attributes").filter(|a| !a.is_null()) {
        for (name, value) in object(attrs, "message.attributes")? {
            let value = value.as_str().ok_or_else(|| {
                // the name comes from the message: shown, but only its start
                let shown: String = name.chars().take(40).collect();
                let cut = if shown.len() < name.len() { "…" } else { "" };
                ParseError::new(format!(
                    "message.attributes.{shown}{cut}: expected a string"
                ))
            })?;
            attributes.insert(name.clone(), value.to_string());
        }
    }
    let data = match opt_str(message, "data", "message")? {
        None => Vec::new(),
        Some(b64) => {
            base64_decode(b64).ok_or_else(|| ParseError::new("message.data: not base64"))?
        }
    };
    let id = loose_str(message, "messageId").or_else(|| loose_str(message, "message_id"));
    Ok(match parse_gcs(&attributes, &data)? {
        Parsed::Events(mut events) => {
            for e in &mut events {
                e.id = e.id.take().or_else(|| id.clone());
            }
            Parsed::Events(events)
        }
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// An OBJECT_FINALIZE as GCS publishes it (attributes per "Pub/Sub notifications for Cloud
    /// Storage"; data is the JSON API object resource).
    fn finalize_gen2() -> (HashMap<String, String>, String) {
        (
            attrs(&[
                ("notificationConfig", "projects/_/buckets/my-bucket/notificationConfigs/1"),
                ("eventType", "OBJECT_FINALIZE"),
                ("payloadFormat", "JSON_API_V1"),
                ("bucketId", "my-bucket"),
                ("objectId", "logs/2024/app log+1.txt"),
                ("objectGeneration", "1714564800000002"),
                ("eventTime", "2024-05-01T12:00:00.123456Z"),
                ("overwroteGeneration", "1714564800000001"),
            ]),
            r#"{"kind": "storage#object", "id": "my-bucket/logs/2024/app log+1.txt/1714564800000002",
                "selfLink": "https://www.googleapis.com/storage/v1/b/my-bucket/o/logs%2F2024%2Fapp%20log+1.txt",
                "name": "logs/2024/app log+1.txt", "bucket": "my-bucket", "generation": "1714564800000002",
                "metageneration": "1", "contentType": "text/plain", "timeCreated": "2024-05-01T12:00:00.120Z",
                "updated": "2024-05-01T12:00:00.120Z", "storageClass": "STANDARD",
                "timeStorageClassUpdated": "2024-05-01T12:00:00.120Z", "size": "2048",
                "md5Hash": "1B2M2Y8AsgTpgAmY7PhCfg==", "crc32c": "AAAAAA==", "etag": "CIKAgICAgICAARAB"}"#
                .to_string(),
        )
    }

    /// The DELETE of generation 1 that GCS sends for the same overwrite.
    fn delete_gen1_overwritten() -> (HashMap<String, String>, String) {
        (
            attrs(&[
                ("eventType", "OBJECT_DELETE"),
                ("payloadFormat", "JSON_API_V1"),
                ("bucketId", "my-bucket"),
                ("objectId", "logs/2024/app log+1.txt"),
                ("objectGeneration", "1714564800000001"),
                ("eventTime", "2024-05-01T12:00:00.130000Z"),
                ("overwrittenByGeneration", "1714564800000002"),
            ]),
            r#"{"kind": "storage#object", "name": "logs/2024/app log+1.txt", "bucket": "my-bucket",
                "generation": "1714564800000001", "metageneration": "3", "size": "1024",
                "etag": "CIGAgICAgICAARAD"}"#
                .to_string(),
        )
    }

    #[test]
    fn overwrite_pair_only_the_finalize_counts() {
        let (a, d) = finalize_gen2();
        let got = parse_gcs(&a, d.as_bytes()).unwrap();
        assert_eq!(
            got,
            Parsed::Events(vec![ChangeEvent {
                bucket: "my-bucket".into(),
                key: "logs/2024/app log+1.txt".into(),
                kind: EventKind::Upsert,
                etag: Some("CIKAgICAgICAARAB".into()),
                size: Some(2048),
                sequencer: Some(Token::Gcs {
                    generation: 1714564800000002,
                    metageneration: 1
                }),
                event_time: Some("2024-05-01T12:00:00.123456Z".into()),
                id: None,
            }])
        );
        let (a, d) = delete_gen1_overwritten();
        assert_eq!(
            parse_gcs(&a, d.as_bytes()),
            Ok(Parsed::Ignore("overwritten"))
        );
        // Versioned buckets send OBJECT_ARCHIVE for the old generation instead.
        let mut archived = a.clone();
        archived.insert("eventType".into(), "OBJECT_ARCHIVE".into());
        assert_eq!(
            parse_gcs(&archived, d.as_bytes()),
            Ok(Parsed::Ignore("overwritten"))
        );
    }

    #[test]
    fn event_type_table() {
        // (eventType, overwrittenByGeneration present, expected kind or ignore reason)
        let cases: &[(&str, bool, Result<EventKind, &str>)] = &[
            ("OBJECT_FINALIZE", false, Ok(EventKind::Upsert)),
            ("OBJECT_METADATA_UPDATE", false, Ok(EventKind::Upsert)),
            ("OBJECT_DELETE", false, Ok(EventKind::Delete)),
            ("OBJECT_ARCHIVE", false, Ok(EventKind::Delete)),
            ("OBJECT_DELETE", true, Err("overwritten")),
            ("OBJECT_ARCHIVE", true, Err("overwritten")),
            ("OBJECT_FINALIZE", true, Ok(EventKind::Upsert)), // only deletes are overwrites
            ("OBJECT_RESTORE", false, Err("gcs: event type not handled")),
            ("object_finalize", false, Err("gcs: event type not handled")),
            ("", false, Err("gcs: event type not handled")),
        ];
        for (event_type, overwritten, want) in cases {
            let mut a = attrs(&[
                ("eventType", event_type),
                ("bucketId", "b"),
                ("objectId", "k"),
                ("objectGeneration", "7"),
                ("payloadFormat", "NONE"),
            ]);
            if *overwritten {
                a.insert("overwrittenByGeneration".into(), "8".into());
            }
            let got = parse_gcs(&a, b"").unwrap();
            match want {
                Ok(kind) => assert_eq!(&got.events().unwrap()[0].kind, kind, "{event_type}"),
                Err(why) => assert_eq!(got, Parsed::Ignore(why), "{event_type}"),
            }
        }
    }

    #[test]
    fn tokens_from_attributes_and_data() {
        // (attribute objectGeneration, data JSON, expected token)
        type Case<'a> = (Option<&'a str>, &'a str, Option<(u64, u64)>);
        let cases: &[Case] = &[
            (
                Some("5"),
                r#"{"generation":"5","metageneration":"4"}"#,
                Some((5, 4)),
            ),
            (Some("5"), r#"{}"#, Some((5, 1))), // metageneration defaults to 1
            (Some("5"), "", Some((5, 1))),      // no payload at all
            (
                None,
                r#"{"generation":"9","metageneration":"2"}"#,
                Some((9, 2)),
            ),
            // fake-gcs-server writes generation as a JSON number and no metageneration.
            (
                Some("1714564800123456"),
                r#"{"kind":"storage#object","generation":1714564800123456,"size":"11"}"#,
                Some((1714564800123456, 1)),
            ),
            (None, r#"{"size":"3"}"#, None),
        ];
        for (generation, data, want) in cases {
            let mut a = attrs(&[
                ("eventType", "OBJECT_FINALIZE"),
                ("bucketId", "b"),
                ("objectId", "k"),
            ]);
            if let Some(g) = generation {
                a.insert("objectGeneration".into(), g.to_string());
            }
            let got = parse_gcs(&a, data.as_bytes()).unwrap();
            let want = want.map(|(generation, metageneration)| Token::Gcs {
                generation,
                metageneration,
            });
            assert_eq!(got.events().unwrap()[0].sequencer, want, "{data}");
        }
        // A later metadata update of the same generation is newer; a recreate even more so.
        let t = |g, m| Token::Gcs {
            generation: g,
            metageneration: m,
        };
        assert_eq!(t(5, 2).newer_than(&t(5, 1)), Some(true));
        assert_eq!(t(6, 1).newer_than(&t(5, 9)), Some(true));
    }

    #[test]
    fn push_envelope() {
        let (a, d) = finalize_gen2();
        let body = serde_json::json!({
            "message": {
                "attributes": a,
                "data": crate::events::text::base64_encode(d.as_bytes()),
                "messageId": "2070443601311540",
                "message_id": "2070443601311540",
                "publishTime": "2024-05-01T12:00:00.5Z",
                "publish_time": "2024-05-01T12:00:00.5Z"
            },
            "subscription": "projects/myproject/subscriptions/mysubscription"
        })
        .to_string();
        let got = parse_gcs_push(&body).unwrap();
        let mut want = parse_gcs(&a, d.as_bytes()).unwrap();
        if let Parsed::Events(e) = &mut want {
            e[0].id = Some("2070443601311540".into());
        }
        assert_eq!(got, want);
        // The overwritten half of the pair, pushed.
        let (a, d) = delete_gen1_overwritten();
        let body =
            serde_json::json!({"message": {"attributes": a, "data": crate::events::text::base64_encode(d.as_bytes()),
            "messageId": "2"}, "subscription": "s"})
            .to_string();
        assert_eq!(parse_gcs_push(&body), Ok(Parsed::Ignore("overwritten")));
    }

    #[test]
    fn mutated_messages_never_panic() {
        for (a, d) in [finalize_gen2(), delete_gen1_overwritten()] {
            for m in crate::events::mutants(d.as_bytes(), 2000) {
                let _ = parse_gcs(&a, &m);
            }
            for (name, value) in &a {
                for m in crate::events::mutants(value.as_bytes(), 200) {
                    let mut a2 = a.clone();
                    a2.insert(name.clone(), String::from_utf8_lossy(&m).into_owned());
                    let _ = parse_gcs(&a2, d.as_bytes());
                }
            }
            let body =
                serde_json::json!({"message": {"attributes": a, "data": crate::events::text::base64_encode(d.as_bytes()),
                "messageId": "1"}, "subscription": "s"})
                .to_string();
            for m in crate::events::mutants(body.as_bytes(), 2000) {
                let _ = parse_gcs_push(&String::from_utf8_lossy(&m));
            }
            let data: serde_json::Value = serde_json::from_str(&d).unwrap();
            for m in crate::events::value_mutants(&data) {
                let _ = parse_gcs(&a, m.to_string().as_bytes());
            }
            let body: serde_json::Value = serde_json::from_str(&body).unwrap();
            for m in crate::events::value_mutants(&body) {
                let _ = parse_gcs_push(&m.to_string());
            }
        }
    }

    #[test]
    fn hostile_messages() {
        let secret = "SECRET-SHOULD-NOT-BE-ECHOED";
        let base = [
            ("eventType", "OBJECT_FINALIZE"),
            ("bucketId", "b"),
            ("objectId", "k"),
        ];
        let with = |extra: &[(&str, &str)]| {
            let mut a = attrs(&base);
            for (k, v) in extra {
                a.insert(k.to_string(), v.to_string());
            }
            a
        };
        let without = |name: &str| {
            let mut a = attrs(&base);
            a.remove(name);
            a
        };
        let big = "x".repeat(1100 * 1024);
        let cases: Vec<(HashMap<String, String>, Vec<u8>, &str)> = vec![
            (HashMap::new(), vec![], "attributes.eventType: missing"),
            (
                without("eventType"),
                vec![],
                "attributes.eventType: missing",
            ),
            (without("bucketId"), vec![], "attributes.bucketId: missing"),
            (without("objectId"), vec![], "attributes.objectId: missing"),
            (
                with(&[("objectId", "")]),
                vec![],
                "attributes.objectId: empty key",
            ),
            (
                with(&[("objectId", "a\u{0}b")]),
                vec![],
                "attributes.objectId: key contains NUL",
            ),
            (
                with(&[("bucketId", "")]),
                vec![],
                "attributes.bucketId: empty bucket name",
            ),
            (
                with(&[("objectGeneration", "-1")]),
                vec![],
                "attributes.objectGeneration: not",
            ),
            (
                with(&[("objectGeneration", secret)]),
                vec![],
                "attributes.objectGeneration: not",
            ),
            (with(&[]), b"null".to_vec(), "data: expected an object"),
            (with(&[]), b"[]".to_vec(), "data: expected an object"),
            (
                with(&[]),
                format!("{{{secret}").into_bytes(),
                "data: not JSON",
            ),
            (with(&[]), vec![0xff, 0xfe, b'{'], "data: not UTF-8"),
            (
                with(&[]),
                format!("{}{}", "[".repeat(5000), "]".repeat(5000)).into_bytes(),
                "data: not JSON",
            ),
            (
                with(&[]),
                br#"{"size":"12 bytes"}"#.to_vec(),
                "data.size: expected a non-negative integer",
            ),
            (
                with(&[]),
                br#"{"size":-5}"#.to_vec(),
                "data.size: expected a non-negative integer",
            ),
            (
                with(&[]),
                br#"{"generation":true}"#.to_vec(),
                "data.generation: expected a non-negative integer",
            ),
            (
                with(&[]),
                br#"{"metageneration":[1]}"#.to_vec(),
                "data.metageneration: expected a non-negative integer",
            ),
            (
                with(&[]),
                br#"{"etag":5}"#.to_vec(),
                "data.etag: expected a string",
            ),
            (with(&[]), big.clone().into_bytes(), "message: 112"),
            (with(&[("pad", big.as_str())]), vec![], "message: 112"),
        ];
        for (a, d, want) in &cases {
            crate::events::assert_rejected(parse_gcs(a, d), want, secret);
        }
        // An unknown event type is ignored even with a hostile payload (it is never read).
        let a = with(&[("eventType", "SOMETHING_NEW")]);
        assert_eq!(
            parse_gcs(&a, b"\xff"),
            Ok(Parsed::Ignore("gcs: event type not handled"))
        );

        let push_cases: Vec<(String, &str)> = vec![
            ("".into(), "body: empty"),
            ("null".into(), "body: expected an object"),
            ("[]".into(), "body: expected an object"),
            ("{}".into(), "message: missing"),
            (r#"{"message":"x"}"#.into(), "message: expected an object"),
            (r#"{"message":{}}"#.into(), "attributes.eventType: missing"),
            (r#"{"message":{"attributes":[]}}"#.into(), "message.attributes: expected an object"),
            (r#"{"message":{"attributes":{"eventType":1}}}"#.into(), "message.attributes.eventType: expected a string"),
            (format!(r#"{{"message":{{"attributes":{{"{}":0}}}}}}"#, "\u{ff}".repeat(200)), "message.attributes.ÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿ…: expected a string"),
            (r#"{"message":{"attributes":{"eventType":"OBJECT_FINALIZE","bucketId":"b","objectId":"k"},"data":"!!"}}"#.into(), "message.data: not base64"),
            (r#"{"message":{"attributes":{"eventType":"OBJECT_FINALIZE","bucketId":"b","objectId":"k"},"data":7}}"#.into(), "message.data: expected a string"),
            // base64 of "[]"
            (r#"{"message":{"attributes":{"eventType":"OBJECT_FINALIZE","bucketId":"b","objectId":"k"},"data":"W10="}}"#.into(), "data: expected an object"),
            (format!(r#"{{"message":{{"pad":"{big}"}}}}"#), "body: 112"),
            (format!("{{\"message\": {secret}"), "body: not JSON"),
        ];
        for (body, want) in &push_cases {
            crate::events::assert_rejected(parse_gcs_push(body), want, secret);
        }
    }
}
