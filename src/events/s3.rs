//! S3 change events as they arrive in an SQS message body. Four shapes:
//! - an S3 event notification, `{"Records":[…]}` (one or more records; keys form-URL-encoded:
//!   `+` is a space, `%XX` a byte);
//! - the `s3:TestEvent` S3 sends when notifications are configured;
//! - either of those wrapped by SNS, `{"Type":"Notification","Message":"<JSON text>"}`;
//! - an EventBridge event, `{"detail-type":"Object Created","source":"aws.s3","detail":{…}}`
//!   (keys taken as written: AWS documents URL encoding only for the notification records).
//!
//! `ObjectCreated:*` and `ObjectTagging:*` are upserts (a tagging change is compared and
//! replicated like metadata); `ObjectRemoved:*` (including `DeleteMarkerCreated`) and
//! `LifecycleExpiration:*` are deletes; every other event name (restore, replication, ACL,
//! lifecycle transition, …) changes nothing to copy and is skipped. A malformed
//! record among good ones becomes a [`Parsed::Invalid`] beside them; a message with no good
//! record fails as a whole.

use serde_json::Value;

use super::text::{
    check_bucket, check_key, check_size, child, display, join, loose_str, object, opt_str, opt_u64,
    parse_json, req_str, url_decode,
};
use super::{ChangeEvent, EventKind, ParseError, Parsed, Token};

/// Parses one SQS message body carrying S3 events (see the module docs for the shapes).
pub fn parse_s3(body: &str) -> Result<Parsed, ParseError> {
    check_size("body", body.len())?;
    let v = parse_json("body", body)?;
    parse_value(&v, "", false)
}

/// `path` is where `v` sits in the message ("" for the body itself, "Message" inside SNS).
fn parse_value(v: &Value, path: &str, inside_sns: bool) -> Result<Parsed, ParseError> {
    let obj = object(v, path)?;
    if obj.contains_key("Records") {
        return parse_records(v, path);
    }
    if obj.get("Event").and_then(Value::as_str) == Some("s3:TestEvent") {
        return Ok(Parsed::Ignore("s3:TestEvent"));
    }
    if obj.contains_key("detail-type") {
        return parse_eventbridge(v, path);
    }
    if let Some(kind) = obj.get("Type").and_then(Value::as_str) {
        if inside_sns {
            return Err(ParseError::new(format!(
                "{}: an SNS envelope inside an SNS envelope",
                display(path)
            )));
        }
        return match kind {
            "Notification" => {
                let inner_path = join(path, "Message");
                let inner = parse_json(&inner_path, req_str(v, "Message", path)?)?;
                parse_value(&inner, &inner_path, true)
            }
            // Never acknowledged in silence: a cross-account SNS → SQS subscription stays
            // unconfirmed until someone opens its SubscribeURL. Kept as a dead letter (the
            // raw message holds the URL) and logged at WARN with the topic.
            "SubscriptionConfirmation" => {
                let topic = v
                    .get("TopicArn")
                    .and_then(Value::as_str)
                    .unwrap_or("(no TopicArn)");
                Err(ParseError::new(format!(
                    "SNS SubscriptionConfirmation for topic {topic}: confirm it by opening the \
                     SubscribeURL of this dead letter (slate deadletters show ID), or with \
                     `aws sns confirm-subscription`"
                )))
            }
            "UnsubscribeConfirmation" => Ok(Parsed::Ignore("sns:UnsubscribeConfirmation")),
            _ => Err(ParseError::new(format!(
                "{}: unknown SNS message type",
                join(path, "Type")
            ))),
        };
    }
    Err(ParseError::new(format!(
        "{}: not an S3 notification (no Records, Event, detail-type or SNS Type)",
        display(path)
    )))
}

/// What an S3 notification `eventName` means for replication (`s3:` prefix optional: AWS
/// omits it, MinIO and others keep it).
fn record_kind(event_name: &str) -> Option<EventKind> {
    let name = event_name.strip_prefix("s3:").unwrap_or(event_name);
    // a tagging change is a change of what travels with the bytes: the engine compares it
    if name.starts_with("ObjectCreated:") || name.starts_with("ObjectTagging:") {
        Some(EventKind::Upsert)
    } else if name.starts_with("ObjectRemoved:") || name.starts_with("LifecycleExpiration:") {
        Some(EventKind::Delete)
    } else {
        None
    }
}

/// Where a notification names its object: `{"bucket":{"name"},"object":{"key", …}}`.
struct Located<'a> {
    bucket: String,
    /// The key as written in the message (still encoded, for notification records).
    raw_key: &'a str,
    object: &'a Value,
    object_path: String,
}

fn locate<'a>(parent: &'a Value, path: &str) -> Result<Located<'a>, ParseError> {
    let bucket_path = join(path, "bucket");
    let bucket = check_bucket(
        &join(&bucket_path, "name"),
        req_str(child(parent, "bucket", path)?, "name", &bucket_path)?,
    )?;
    let object_path = join(path, "object");
    let object = child(parent, "object", path)?;
    Ok(Located {
        bucket,
        raw_key: req_str(object, "key", &object_path)?,
        object,
        object_path,
    })
}

/// `eTag` in notification records, `etag` in EventBridge (moto writes `eTag` in both).
fn etag(object: &Value, path: &str) -> Result<Option<String>, ParseError> {
    Ok(match opt_str(object, "eTag", path)? {
        Some(e) => Some(e.to_string()),
        None => opt_str(object, "etag", path)?.map(str::to_string),
    })
}

fn parse_records(v: &Value, path: &str) -> Result<Parsed, ParseError> {
    let records_path = join(path, "Records");
    let records = child(v, "Records", path)?
        .as_array()
        .ok_or_else(|| ParseError::new(format!("{records_path}: expected an array")))?;
    // each record on its own: a malformed one must not take the others with it
    let (mut events, mut bad) = (Vec::with_capacity(records.len()), super::Bad::default());
    for (i, record) in records.iter().enumerate() {
        match parse_record(record, &format!("{records_path}[{i}]")) {
            Ok(Some(ev)) => events.push(ev),
            Ok(None) => {}
            Err(e) => bad.push(e),
        }
    }
    let good = if events.is_empty() {
        Parsed::Ignore("s3: no create or delete records")
    } else {
        Parsed::Events(events)
    };
    Parsed::from_parts(vec![good], bad)
}

/// One notification record: `None` for an event that changes nothing to copy.
fn parse_record(record: &Value, rp: &str) -> Result<Option<ChangeEvent>, ParseError> {
    let name = req_str(record, "eventName", rp)?;
    let Some(kind) = record_kind(name) else {
        return Ok(None);
    };
    // a tagging record may carry the sequencer of the object's last write: an ordering
    // token equal to the one applied would skip it as stale, so it orders nothing
    let tagging = name.trim_start_matches("s3:").starts_with("ObjectTagging:");
    let at = locate(child(record, "s3", rp)?, &join(rp, "s3"))?;
    let key_path = join(&at.object_path, "key");
    let key = check_key(&key_path, url_decode(&key_path, at.raw_key, true)?)?;
    Ok(Some(ChangeEvent {
        bucket: at.bucket,
        key,
        kind,
        etag: etag(at.object, &at.object_path)?,
        size: opt_u64(at.object, "size", &at.object_path)?,
        sequencer: if tagging { None } else { sequencer(at.object) },
        event_time: loose_str(record, "eventTime"),
        id: None,
    }))
}

fn parse_eventbridge(v: &Value, path: &str) -> Result<Parsed, ParseError> {
    let detail_type = req_str(v, "detail-type", path)?;
    if req_str(v, "source", path)? != "aws.s3" {
        return Ok(Parsed::Ignore("eventbridge: source is not aws.s3"));
    }
    let kind = match detail_type {
        "Object Created" | "Object Tags Added" | "Object Tags Deleted" => EventKind::Upsert,
        "Object Deleted" => EventKind::Delete,
        _ => {
            return Ok(Parsed::Ignore(
                "eventbridge: not an object create, delete or tag change",
            ))
        }
    };
    let at = locate(child(v, "detail", path)?, &join(path, "detail"))?;
    let key = check_key(&join(&at.object_path, "key"), at.raw_key.to_string())?;
    Ok(Parsed::Events(vec![ChangeEvent {
        bucket: at.bucket,
        key,
        kind,
        etag: etag(at.object, &at.object_path)?,
        size: opt_u64(at.object, "size", &at.object_path)?,
        sequencer: if detail_type.starts_with("Object Tags") {
            None
        } else {
            sequencer(at.object)
        },
        event_time: loose_str(v, "time"),
        id: loose_str(v, "id"),
    }]))
}

/// S3's `sequencer`: hexadecimal digits, ordered after left-padding to 40 digits
/// (`route::token_text`). Anything else (`"Happy Sequencer"` in AWS's own Lambda fixtures, a
/// number, 41 digits) is dropped and the event kept without a token: stored as text it would
/// sort above every real one of its key and the daemon would skip that key's later events as
/// stale, while an untokened event is never outranked and the daemon reads the source before
/// it acts on it. Refusing the record instead would dead-letter a real change for good (its
/// retry would fail the same way).
fn sequencer(object: &Value) -> Option<Token> {
    object
        .get("sequencer")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= 40 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|s| Token::S3(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shaped like the example in AWS's "Event message structure" page (version 2.1 fields),
    /// with two records: a PUT with a form-encoded key and a DELETE.
    const AWS_TWO_RECORDS: &str = r#"{
      "Records": [
        {
          "eventVersion": "2.1",
          "eventSource": "aws:s3",
          "awsRegion": "us-west-2",
          "eventTime": "2024-05-01T12:00:00.123Z",
          "eventName": "ObjectCreated:Put",
          "userIdentity": {"principalId": "AWS:AIDAEXAMPLE"},
          "requestParameters": {"sourceIPAddress": "203.0.113.7"},
          "responseElements": {"x-amz-request-id": "C3D13FE58DE4C810", "x-amz-id-2": "FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V5Wp6S7S/JRWeUWerMUE5JgHvANOjpD"},
          "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": "slate",
            "bucket": {"name": "amzn-s3-demo-bucket", "ownerIdentity": {"principalId": "A3NL1KOZZKExample"}, "arn": "arn:aws:s3:::amzn-s3-demo-bucket"},
            "object": {"key": "photos/red+flower%2B1.jpg", "size": 1024, "eTag": "d41d8cd98f00b204e9800998ecf8427e", "versionId": "096fKKXTRTtl3on89fVO.nfljtsv6qko", "sequencer": "0055AED6DCD90281E5"}
          }
        },
        {
          "eventVersion": "2.1",
          "eventSource": "aws:s3",
          "awsRegion": "us-west-2",
          "eventTime": "2024-05-01T12:00:01.456Z",
          "eventName": "ObjectRemoved:Delete",
          "s3": {
            "s3SchemaVersion": "1.0",
            "bucket": {"name": "amzn-s3-demo-bucket", "arn": "arn:aws:s3:::amzn-s3-demo-bucket"},
            "object": {"key": "old%2Freport+2023.csv", "sequencer": "0055AED6DCD90281E6"}
          }
        }
      ]
    }"#;

    /// AWS's s3:LifecycleExpiration:Delete example (eventVersion 2.3), minus the stray comma
    /// the published page has after `sequencer`.
    const AWS_LIFECYCLE: &str = r#"{"Records":[{"eventVersion":"2.3","eventSource":"aws:s3","awsRegion":"us-west-2",
      "eventTime":"1970-01-01T00:00:00.000Z","eventName":"LifecycleExpiration:Delete",
      "userIdentity":{"principalId":"s3.amazonaws.com"},"requestParameters":{"sourceIPAddress":"s3.amazonaws.com"},
      "responseElements":{"x-amz-request-id":"C3D13FE58DE4C810","x-amz-id-2":"FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V5Wp6S7S/JRWeUWerMUE5JgHvANOjpD"},
      "s3":{"s3SchemaVersion":"1.0","configurationId":"testConfigRule",
        "bucket":{"name":"amzn-s3-demo-bucket","ownerIdentity":{"principalId":"A3NL1KOZZKExample"},"arn":"arn:aws:s3:::amzn-s3-demo-bucket"},
        "object":{"key":"expiration/delete","sequencer":"0055AED6DCD90281E5"}}}]}"#;

    /// What moto sends to SQS: no sequencer, no zone on eventTime, keys form-encoded.
    const MOTO_PUT: &str = r#"{"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
      "eventTime": "2025-01-02T03:04:05.678901", "eventName": "ObjectCreated:Put",
      "s3": {"s3SchemaVersion": "1.0", "configurationId": "cfg",
        "bucket": {"name": "src", "arn": "arn:aws:s3:::src"},
        "object": {"key": "dir%2Fa+b.txt", "size": 11, "eTag": "5eb63bbbe01eeed093cb22bb8f5acdc3"}}}]}"#;

    /// moto's TestEvent (AWS adds RequestId and HostId).
    const TEST_EVENT: &str = r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2024-05-01T12:00:00.000Z","Bucket":"amzn-s3-demo-bucket","RequestId":"5582815E1AEA5ADF","HostId":"8cLeGAmw098X5cv4Zkwcmo8vvZa3eH3eKxsPzbB9wrR+YstdA6Knx4Ip8EXAMPLE"}"#;

    /// AWS's EventBridge "Object Created" example.
    const EVENTBRIDGE_CREATED: &str = r#"{
      "version": "0", "id": "17793124-05d4-b198-2fde-7ededc63b103", "detail-type": "Object Created",
      "source": "aws.s3", "account": "111122223333", "time": "2021-11-12T00:00:00Z", "region": "ca-central-1",
      "resources": ["arn:aws:s3:::amzn-s3-demo-bucket1"],
      "detail": {"version": "0", "bucket": {"name": "amzn-s3-demo-bucket1"},
        "object": {"key": "example-key", "size": 5, "etag": "b1946ac92492d2347c6235b4d2611184",
                   "version-id": "IYV3p45BT0ac8hjHg1houSdS1a.Mro8e", "sequencer": "617f08299329d189"},
        "request-id": "N4N7GDK58NMKJ12R", "requester": "123456789012", "source-ip-address": "1.2.3.4", "reason": "PutObject"}}"#;

    fn sns(message: &str) -> String {
        serde_json::json!({
            "Type": "Notification",
            "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
            "TopicArn": "arn:aws:sns:us-west-2:123456789012:s3-events",
            "Subject": "Amazon S3 Notification",
            "Message": message,
            "Timestamp": "2024-05-01T12:00:00.200Z",
            "SignatureVersion": "1",
            "Signature": "EXAMPLE",
            "SigningCertURL": "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-EXAMPLE.pem",
            "UnsubscribeURL": "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe"
        })
        .to_string()
    }

    fn record(event_name: &str, key: &str) -> String {
        serde_json::json!({"Records": [{"eventSource": "aws:s3", "eventName": event_name,
            "eventTime": "2024-05-01T12:00:00.000Z",
            "s3": {"bucket": {"name": "b"}, "object": {"key": key, "size": 3}}}]})
        .to_string()
    }

    fn events(body: &str) -> Vec<ChangeEvent> {
        match parse_s3(body) {
            Ok(Parsed::Events(e)) => e,
            other => panic!("expected events, got {other:?}"),
        }
    }

    #[test]
    fn tagging_changes_are_upserts_that_order_nothing() {
        let body = serde_json::json!({"Records": [{"eventName": "ObjectTagging:Put",
            "s3": {"bucket": {"name": "b"}, "object": {"key": "k", "sequencer": "0055AED6DCD90281E5"}}}]})
        .to_string();
        let e = events(&body);
        assert_eq!(
            (e[0].kind.clone(), e[0].sequencer.clone()),
            (EventKind::Upsert, None)
        );
        let body = serde_json::json!({"version": "0", "id": "t1", "detail-type": "Object Tags Added",
            "source": "aws.s3", "time": "2024-05-01T12:00:00Z",
            "detail": {"bucket": {"name": "b"}, "object": {"key": "k", "sequencer": "617f08299329d189"}}})
        .to_string();
        let e = events(&body);
        assert_eq!(
            (e[0].kind.clone(), e[0].sequencer.clone()),
            (EventKind::Upsert, None)
        );
    }

    #[test]
    fn aws_multi_record_message() {
        let e = events(AWS_TWO_RECORDS);
        assert_eq!(e.len(), 2);
        assert_eq!(
            e[0],
            ChangeEvent {
                bucket: "amzn-s3-demo-bucket".into(),
                key: "photos/red flower+1.jpg".into(),
                kind: EventKind::Upsert,
                etag: Some("d41d8cd98f00b204e9800998ecf8427e".into()),
                size: Some(1024),
                sequencer: Some(Token::S3("0055AED6DCD90281E5".into())),
                event_time: Some("2024-05-01T12:00:00.123Z".into()),
                id: None,
            }
        );
        assert_eq!(e[1].key, "old/report 2023.csv");
        assert_eq!(e[1].kind, EventKind::Delete);
        assert_eq!(e[1].size, None);
        assert_eq!(e[1].etag, None);
        assert!(
            e[1].sequencer
                .as_ref()
                .unwrap()
                .newer_than(e[0].sequencer.as_ref().unwrap())
                == Some(true)
        );
    }

    #[test]
    fn key_decoding_table() {
        // (key as S3 writes it in the event, the real key)
        let cases = [
            ("a+b", "a b"),
            ("a%2Bb", "a+b"),
            ("a%2bb+%2B+c", "a+b + c"),
            ("dir%2Fsub%2Ffile.txt", "dir/sub/file.txt"),
            ("dir/sub/file.txt", "dir/sub/file.txt"), // AWS leaves '/' alone in practice
            ("caf%C3%A9+%E2%9C%93.txt", "café ✓.txt"),
            (
                "%E6%97%A5%E6%9C%AC%E8%AA%9E/%F0%9F%92%8E.log",
                "日本語/💎.log",
            ),
            ("5%3A00.log", "5:00.log"),
            ("year%3D2025/red+flower.jpg", "year=2025/red flower.jpg"),
            ("100%25+done", "100% done"),
            ("..%2Fescape", "../escape"), // a legal S3 key; the copier guards local paths
        ];
        for (encoded, want) in cases {
            let e = events(&record("ObjectCreated:Put", encoded));
            assert_eq!(e[0].key, want, "{encoded}");
        }
    }

    #[test]
    fn event_name_table() {
        // (eventName, Some(kind) or None for skipped)
        let cases = [
            ("ObjectCreated:Put", Some(EventKind::Upsert)),
            ("ObjectCreated:Post", Some(EventKind::Upsert)),
            ("ObjectCreated:Copy", Some(EventKind::Upsert)),
            (
                "ObjectCreated:CompleteMultipartUpload",
                Some(EventKind::Upsert),
            ),
            ("s3:ObjectCreated:Put", Some(EventKind::Upsert)), // MinIO keeps the prefix
            ("ObjectRemoved:Delete", Some(EventKind::Delete)),
            ("ObjectRemoved:DeleteMarkerCreated", Some(EventKind::Delete)),
            ("LifecycleExpiration:Delete", Some(EventKind::Delete)),
            (
                "LifecycleExpiration:DeleteMarkerCreated",
                Some(EventKind::Delete),
            ),
            ("ObjectRestore:Post", None),
            ("ObjectRestore:Completed", None),
            ("ObjectRestore:Delete", None),
            ("Replication:OperationFailedReplication", None),
            ("LifecycleTransition", None),
            ("IntelligentTiering", None),
            ("ObjectTagging:Put", Some(EventKind::Upsert)),
            ("ObjectTagging:Delete", Some(EventKind::Upsert)),
            ("ObjectAcl:Put", None),
            ("ReducedRedundancyLostObject", None),
            ("objectcreated:put", None), // names are case-sensitive
        ];
        for (name, want) in cases {
            let got = parse_s3(&record(name, "k")).unwrap();
            match want {
                Some(kind) => assert_eq!(got.events().unwrap()[0].kind, kind, "{name}"),
                None => assert_eq!(
                    got,
                    Parsed::Ignore("s3: no create or delete records"),
                    "{name}"
                ),
            }
        }
    }

    #[test]
    fn skipped_records_do_not_hide_the_others() {
        let body = serde_json::json!({"Records": [
            {"eventName": "ObjectRestore:Completed", "s3": {"bucket": {"name": "b"}, "object": {"key": "x"}}},
            {"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "b"}, "object": {"key": "y"}}},
            {"eventName": "Replication:OperationNotTracked", "s3": {"bucket": {"name": "b"}, "object": {"key": "z"}}}
        ]})
        .to_string();
        let e = events(&body);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].key, "y");
    }

    #[test]
    fn a_sequencer_that_is_not_one_is_dropped_and_the_event_kept() {
        // (sequencer as JSON, token kept)
        let long = format!("\"1{}\"", "0".repeat(40));
        let cases: Vec<(String, Option<&str>)> = vec![
            ("\"0055AED6DCD90281E5\"".into(), Some("0055AED6DCD90281E5")),
            ("\"Happy Sequencer\"".into(), None), // AWS's Lambda fixtures
            ("12".into(), None),
            ("\"\"".into(), None),
            (long, None),
            ("null".into(), None),
        ];
        for (seq, want) in cases {
            let body = format!(
                r#"{{"Records":[{{"eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"b"}},"object":{{"key":"k","sequencer":{seq}}}}}}}]}}"#
            );
            let e = events(&body);
            assert_eq!(e.len(), 1, "{body}");
            assert_eq!(e[0].sequencer, want.map(|s| Token::S3(s.into())), "{body}");
        }
    }

    #[test]
    fn a_malformed_record_does_not_take_the_good_ones_with_it() {
        let good = |key: &str| {
            serde_json::json!({"eventName": "ObjectCreated:Put",
                "s3": {"bucket": {"name": "b"}, "object": {"key": key}}})
        };
        // (records, keys kept, reasons of the bad ones)
        let cases: Vec<(serde_json::Value, Vec<&str>, Vec<&str>)> = vec![
            (
                serde_json::json!([good("a"), {"eventName": "ObjectCreated:Put"}, good("c")]),
                vec!["a", "c"],
                vec!["Records[1].s3: missing"],
            ),
            (
                serde_json::json!([
                    {"eventName": "ObjectRemoved:Delete", "s3": {"bucket": {"name": "b"},
                        "object": {"key": "k", "sequencer": "SECRET-not-hex"}}},
                    good("x"),
                    null,
                ]),
                // a sequencer that is not one: the record kept, unordered
                vec!["k", "x"],
                vec!["Records[2]: expected an object, found null"],
            ),
        ];
        for (records, keys, reasons) in cases {
            let body = serde_json::json!({ "Records": records }).to_string();
            let Ok(Parsed::Batch(items)) = parse_s3(&body) else {
                panic!("{body}: {:?}", parse_s3(&body));
            };
            let Parsed::Events(evs) = &items[0] else {
                panic!("{items:?}")
            };
            assert_eq!(evs.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), keys);
            let bad: Vec<&str> = items[1..]
                .iter()
                .map(|p| match p {
                    Parsed::Invalid(why) => why.as_str(),
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(bad, reasons);
            assert!(!bad.iter().any(|r| r.contains("SECRET")));
        }
        // wrapped by SNS, the same
        let inner = serde_json::json!({"Records": [good("s"), {}]}).to_string();
        let Ok(Parsed::Batch(items)) = parse_s3(&sns(&inner)) else {
            panic!()
        };
        assert_eq!(
            items[1],
            Parsed::Invalid("Message.Records[1].eventName: missing".into())
        );
    }

    #[test]
    fn lifecycle_expiration_is_a_delete() {
        let e = events(AWS_LIFECYCLE);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].key, "expiration/delete");
        assert_eq!(e[0].kind, EventKind::Delete);
        assert_eq!(e[0].sequencer, Some(Token::S3("0055AED6DCD90281E5".into())));
        assert_eq!(e[0].size, None);
    }

    #[test]
    fn moto_records_have_no_sequencer() {
        let e = events(MOTO_PUT);
        assert_eq!(e[0].key, "dir/a b.txt");
        assert_eq!(e[0].bucket, "src");
        assert_eq!(e[0].size, Some(11));
        assert_eq!(e[0].sequencer, None);
        assert_eq!(
            e[0].event_time.as_deref(),
            Some("2025-01-02T03:04:05.678901")
        );
    }

    #[test]
    fn test_event_is_ignored_raw_and_wrapped() {
        assert_eq!(parse_s3(TEST_EVENT), Ok(Parsed::Ignore("s3:TestEvent")));
        assert_eq!(
            parse_s3(&sns(TEST_EVENT)),
            Ok(Parsed::Ignore("s3:TestEvent"))
        );
    }

    #[test]
    fn sns_wrapped_notification_is_unwrapped() {
        assert_eq!(parse_s3(&sns(AWS_TWO_RECORDS)), parse_s3(AWS_TWO_RECORDS));
        assert_eq!(
            parse_s3(&sns(EVENTBRIDGE_CREATED)),
            parse_s3(EVENTBRIDGE_CREATED)
        );
        let confirm = r#"{"Type":"SubscriptionConfirmation","MessageId":"m","Token":"t","TopicArn":"arn:aws:sns:us-east-1:1:t","Message":"You have chosen to subscribe","SubscribeURL":"https://sns.example/"}"#;
        // kept as a dead letter naming the topic (never acknowledged in silence)
        let e = parse_s3(confirm).unwrap_err();
        assert!(
            e.reason
                .starts_with("SNS SubscriptionConfirmation for topic arn:aws:sns:us-east-1:1:t"),
            "{e}"
        );
        assert!(e.reason.contains("SubscribeURL"), "{e}");
    }

    #[test]
    fn eventbridge_object_created() {
        let e = events(EVENTBRIDGE_CREATED);
        assert_eq!(
            e,
            vec![ChangeEvent {
                bucket: "amzn-s3-demo-bucket1".into(),
                key: "example-key".into(),
                kind: EventKind::Upsert,
                etag: Some("b1946ac92492d2347c6235b4d2611184".into()),
                size: Some(5),
                sequencer: Some(Token::S3("617f08299329d189".into())),
                event_time: Some("2021-11-12T00:00:00Z".into()),
                id: Some("17793124-05d4-b198-2fde-7ededc63b103".into()),
            }]
        );
    }

    #[test]
    fn eventbridge_table() {
        let eb = |detail_type: &str, source: &str, key: &str| {
            serde_json::json!({"version": "0", "id": "e1", "detail-type": detail_type, "source": source,
                "time": 1714564800.5,  // moto sends a number; it is dropped, not fatal
                "detail": {"version": "0", "bucket": {"name": "b"},
                    "object": {"key": key, "size": 7, "eTag": "abc", "sequencer": "00A"},
                    "deletion-type": "Permanently Deleted", "reason": "DeleteObject"}})
            .to_string()
        };
        let got = parse_s3(&eb("Object Deleted", "aws.s3", "a b+c%2B.txt")).unwrap();
        let e = &got.events().unwrap()[0];
        assert_eq!(e.kind, EventKind::Delete);
        assert_eq!(
            e.key, "a b+c%2B.txt",
            "EventBridge keys are taken literally"
        );
        assert_eq!(e.etag.as_deref(), Some("abc"));
        assert_eq!(e.event_time, None);
        let ignored = [
            (
                eb("Object Restore Completed", "aws.s3", "k"),
                "eventbridge: not an object create, delete or tag change",
            ),
            (
                eb("Object Storage Class Changed", "aws.s3", "k"),
                "eventbridge: not an object create, delete or tag change",
            ),
            (
                eb("Object Created", "aws.ec2", "k"),
                "eventbridge: source is not aws.s3",
            ),
        ];
        for (body, why) in ignored {
            assert_eq!(parse_s3(&body), Ok(Parsed::Ignore(why)));
        }
        let e = parse_s3(&eb("Object Created", "aws.s3", "bad\u{0}key")).unwrap_err();
        assert_eq!(e.reason, "detail.object.key: key contains NUL");
    }

    #[test]
    fn mutated_messages_never_panic() {
        for fixture in [
            AWS_TWO_RECORDS,
            AWS_LIFECYCLE,
            MOTO_PUT,
            TEST_EVENT,
            EVENTBRIDGE_CREATED,
        ] {
            for m in crate::events::mutants(fixture.as_bytes(), 3000) {
                let text = String::from_utf8_lossy(&m);
                let _ = parse_s3(&text);
                let _ = parse_s3(&sns(&text));
            }
            let v: Value = serde_json::from_str(fixture).unwrap();
            for m in crate::events::value_mutants(&v) {
                let _ = parse_s3(&m.to_string());
                let _ = parse_s3(&sns(&m.to_string()));
            }
        }
    }

    /// Inputs that must give an error or an Ignore, never a panic; errors must name a field or
    /// the body and never echo it.
    #[test]
    fn hostile_bodies() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let deep_obj = format!("{}1{}", r#"{"a":"#.repeat(5_000), "}".repeat(5_000));
        let huge = format!(r#"{{"Records":[], "pad":"{}"}}"#, "x".repeat(1100 * 1024));
        let secret = "SECRET-SHOULD-NOT-BE-ECHOED";
        let cases: Vec<(String, &str)> = vec![
            ("".into(), "body: empty"),
            ("   \n".into(), "body: empty"),
            ("null".into(), "body: expected an object"),
            ("[]".into(), "body: expected an object"),
            ("42".into(), "body: expected an object"),
            (format!("\"{secret}\""), "body: expected an object"),
            ("{".into(), "body: not JSON"),
            (format!("{{\"Records\": [{secret}"), "body: not JSON"),
            (deep, "body: not JSON"),
            (deep_obj, "body: not JSON"),
            (huge, "body: 112"),
            ("{}".into(), "body: not an S3 notification"),
            (format!(r#"{{"Hello":"{secret}"}}"#), "body: not an S3 notification"),
            (r#"{"Records":null}"#.into(), "Records: missing"),
            (r#"{"Records":"x"}"#.into(), "Records: expected an array"),
            (r#"{"Records":{}}"#.into(), "Records: expected an array"),
            (r#"{"Records":[null]}"#.into(), "Records[0]: expected an object, found null"),
            (r#"{"Records":[[]]}"#.into(), "Records[0]: expected an object, found an array"),
            (r#"{"Records":[{}]}"#.into(), "Records[0].eventName: missing"),
            (r#"{"Records":[{"eventName":5}]}"#.into(), "Records[0].eventName: expected a string"),
            (r#"{"Records":[{"eventName":"ObjectCreated:Put"}]}"#.into(), "Records[0].s3: missing"),
            (r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":[]}]}"#.into(), "Records[0].s3: expected an object"),
            (r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"}}}]}"#.into(), "Records[0].s3.object: missing"),
            (r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{},"object":{"key":"k"}}}]}"#.into(), "Records[0].s3.bucket.name: missing"),
            (r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":""},"object":{"key":"k"}}}]}"#.into(), "Records[0].s3.bucket.name: empty bucket name"),
            (r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":7}}}]}"#.into(), "Records[0].s3.object.key: expected a string"),
            (record("ObjectCreated:Put", ""), "Records[0].s3.object.key: empty key"),
            (record("ObjectCreated:Put", "bad%C3%28utf8"), "Records[0].s3.object.key: not UTF-8"),
            (record("ObjectCreated:Put", "%FF%FE"), "Records[0].s3.object.key: not UTF-8"),
            (record("ObjectCreated:Put", "nul%00inside"), "Records[0].s3.object.key: key contains NUL"),
            (record("ObjectCreated:Put", "raw\u{0}nul"), "Records[0].s3.object.key: key contains NUL"),
            (record("ObjectCreated:Put", "trailing%"), "Records[0].s3.object.key: bad percent-encoding"),
            (record("ObjectCreated:Put", "%zz"), "Records[0].s3.object.key: bad percent-encoding"),
            (r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k","size":-1}}}]}"#.into(), "Records[0].s3.object.size: expected a non-negative integer"),
            (r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k","size":"big"}}}]}"#.into(), "Records[0].s3.object.size: expected a non-negative integer"),
            // no good record at all: the message fails as a whole, naming the first bad one
            (r#"{"Records":[{"eventName":"ObjectRestore:Post"},{"eventName":"ObjectCreated:Put"}]}"#.into(), "Records[1].s3: missing"),
            (r#"{"Records":[{"eventName":"ObjectCreated:Put"},{"eventName":5},{}]}"#.into(), "Records[0].s3: missing (and 2 more malformed events)"),
            (r#"{"Type":"Notification"}"#.into(), "Message: missing"),
            (r#"{"Type":"Notification","Message":{"Records":[]}}"#.into(), "Message: expected a string"),
            (format!(r#"{{"Type":"Notification","Message":"{secret} is not json"}}"#), "Message: not JSON"),
            (r#"{"Type":"Notification","Message":""}"#.into(), "Message: empty"),
            (sns(&sns(TEST_EVENT)), "Message: an SNS envelope inside an SNS envelope"),
            (r#"{"Type":"Weird"}"#.into(), "Type: unknown SNS message type"),
            (r#"{"detail-type":"Object Created"}"#.into(), "source: missing"),
            (r#"{"detail-type":"Object Created","source":"aws.s3"}"#.into(), "detail: missing"),
            (r#"{"detail-type":"Object Created","source":"aws.s3","detail":"x"}"#.into(), "detail: expected an object"),
            (r#"{"detail-type":"Object Created","source":"aws.s3","detail":{"bucket":{"name":"b"},"object":{}}}"#.into(), "detail.object.key: missing"),
            (r#"{"detail-type":7,"source":"aws.s3"}"#.into(), "detail-type: expected a string"),
        ];
        for (body, want) in &cases {
            let e = crate::events::assert_rejected(parse_s3(body), want, secret);
            assert!(!e.reason.contains('\n'));
        }
        // Well-formed messages with nothing to do are ignored, not errors.
        for body in [
            r#"{"Records":[]}"#,
            r#"{"Records":[{"eventName":"ObjectRestore:Post"}]}"#,
        ] {
            assert_eq!(
                parse_s3(body),
                Ok(Parsed::Ignore("s3: no create or delete records"))
            );
        }
    }
}
